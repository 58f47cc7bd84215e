//! The holder's side of the link decision: for each tensor and requester,
//! what compressing it costs (encode here, decode there) and saves (the
//! share of its bytes), and so, for each requester and direction, the link
//! rate above which sending its tensors raw is faster: their break-even
//! rate.
//!
//! Sending `n` raw bytes over a link of rate `r` takes `n / r`; compressed,
//! it takes `n (1 − saved) / r` plus `n (encode + decode)` per byte. So
//! compressing a tensor pays while `r < saved / (encode + decode)`, and a
//! step's tensors together while `r < Σ n·saved / Σ n·(encode + decode)`.
//!
//! The decision is taken for the requester's tensors together, on that
//! sum, not tensor by tensor: all of them cross raw once the link is
//! [`Link::margin`] times faster than their break-even, and all are
//! compressed again as soon as it is slower. Tensor by tensor, a link of
//! about 1 Gbit/s sent a job's small tensors raw and compressed its large
//! ones: no faster than compressing them all (the small ones' bytes take
//! microseconds either way), several times the bytes, and over nine seeds
//! in pods 0.5–0.7 points less accurate on average than compressing them
//! all (within the noise, but never ahead). Taken together, a job's calls
//! are either all compressed, as `always` does, or all raw, as without
//! tlc. While they pass, one call in [`PROBE_EVERY`] of each tensor is
//! still compressed, so its cost and saving stay current.
//!
//! Before a requester knows its link's rate, and whenever its last raw
//! answers are too old to trust, a tensor of 64 KiB to 8 MiB crosses raw
//! every [`EXPLORE_EVERY`] at most ([`Verdict::Explore`]): only raw
//! answers time a link (see [`super::meter`]).
//!
//! Raw and compressed calls of one tensor must add up to the model that
//! compressing every call would give, or a job that mixes them trains on
//! something else. Two states would otherwise go stale across a switch:
//!
//! - a push's error buffer: a lossy call leaves part of the gradient in
//!   it, which only the tensor's next compressed call delivers. While the
//!   tensor passes that may be 64 steps later, and a synchronous job lost
//!   up to 3.3 points of accuracy to the wait. So the first call that
//!   would cross raw after a lossy one crosses exactly through the buffer
//!   instead ([`Verdict::Settle`]: the gradient plus the buffer, which
//!   then is empty);
//! - a pull's replica: raw answers leave it at the last compressed
//!   version, so the first compressed answer after them would quantize
//!   the model's whole drift since. That call settles the replica onto
//!   the model exactly instead, and the lossy call follows.
//!
//! A settling call is as large as a raw one; it costs a copy, not an
//! encode.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tlc_context::table::lock;
use tlc_core::{Direction, TensorKey};

use crate::policy::Link;
use crate::training::bounded::Bounded;

/// While a tensor passes, one call in this many is compressed.
pub const PROBE_EVERY: u32 = 64;
/// Tensors (per requester and direction) remembered at most.
const MAX_TENSORS: usize = 1 << 16;
/// Requesters remembered for exploring at most.
const MAX_REQUESTERS: usize = 4096;
/// Sizes of the tensors sent raw to let a requester time its link: large
/// enough to make a sample (see [`super::meter::MIN_BURST`]), small enough
/// that one costs a slow link little (8 MiB: 7 s at 10 Mbit/s, once per
/// [`super::meter::RAW_TRUST`] while the link stays compressed).
const EXPLORE_BYTES: std::ops::RangeInclusive<u64> = (64 << 10)..=(8 << 20);
/// At most one tensor sent raw to explore per requester this often.
pub const EXPLORE_EVERY: Duration = Duration::from_secs(2);

/// Which tensor, to which requester, asked by whom.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayoffKey {
    /// The tensor between this holder and the requesting task.
    pub tensor: TensorKey,
    /// Who asked, as the holder knows it whatever the call says of itself
    /// (its TLS identity, else its connection): decisions are kept apart
    /// per source, so that a connection naming another requester's task,
    /// with a made-up `tlc-link`, moves only its own.
    pub source: String,
    /// Push or pull.
    pub direction: Direction,
}

/// What to do with one tensor now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Compress it.
    Compress,
    /// Compress it, though it is passing: a probe.
    Probe,
    /// Send it raw: the link is faster than compressing.
    Pass,
    /// Send it raw so that the requester can time its link.
    Explore,
    /// Send it exactly through its memory: a push's pending error goes
    /// with it, a pull's replica becomes the model. Then
    /// [`Payoffs::settled`].
    Settle,
}

/// What the two sides know of the link now.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkNow {
    /// Bytes per second, if known.
    pub rate: Option<f64>,
    /// The requester's decode cost, picoseconds per byte, if known.
    pub decode_ps_per_byte: Option<f64>,
}

/// The tensors of one requester and direction, together: the sums of
/// their bytes, their bytes saved and their encode cost, each tensor
/// counted at its last size and moving averages.
#[derive(Debug, Clone, Copy, Default)]
struct Group {
    /// `Σ n`.
    bytes: f64,
    /// `Σ n·saved`.
    saved_bytes: f64,
    /// `Σ n·encode`, picoseconds.
    encode_ps: f64,
    /// Whether they cross raw now.
    passing: bool,
}

impl Group {
    /// Bytes per second below which compressing them pays.
    fn break_even(&self, decode_ps_per_byte: Option<f64>) -> f64 {
        if self.bytes <= 0.0 || self.saved_bytes <= 0.0 {
            return 0.0;
        }
        // A requester that has not decoded yet: take its cost as ours.
        let encode = self.encode_ps / self.bytes;
        let decode = decode_ps_per_byte.unwrap_or(encode);
        let cost = (encode + decode) * 1e-12;
        if cost <= 0.0 {
            f64::INFINITY
        } else {
            self.saved_bytes / self.bytes / cost
        }
    }

    /// Adds what one tensor stands for (`sign` −1 takes it out again).
    fn count(&mut self, payoff: &Payoff, sign: f64) {
        let n = payoff.raw_bytes as f64;
        // Clamped: a group forgotten and made anew has nothing to take out.
        self.bytes = (self.bytes + sign * n).max(0.0);
        self.saved_bytes = (self.saved_bytes + sign * n * payoff.saved).max(0.0);
        self.encode_ps = (self.encode_ps + sign * n * payoff.encode_ps_per_byte).max(0.0);
    }
}

/// A requester's groups, by direction.
#[derive(Debug, Clone, Copy, Default)]
struct Groups {
    push: Group,
    pull: Group,
}

impl Groups {
    fn of(&mut self, direction: Direction) -> &mut Group {
        match direction {
            Direction::Push => &mut self.push,
            Direction::Pull => &mut self.pull,
        }
    }
}

/// Tensors and their groups, under one lock.
#[derive(Debug)]
struct Table {
    tensors: Bounded<PayoffKey, Payoff>,
    groups: Bounded<Requester, Groups>,
}

/// A requester task as one source asked for it: what groups and
/// exploring are kept by.
type Requester = (String, String);

impl PayoffKey {
    fn requester_of(&self) -> Requester {
        (self.tensor.requester.clone(), self.source.clone())
    }
}

/// One tensor's costs and state.
#[derive(Debug, Clone, Copy, Default)]
struct Payoff {
    /// Encode cost, picoseconds per raw byte (moving average).
    encode_ps_per_byte: f64,
    /// Share of the bytes compressing saves (moving average).
    saved: f64,
    /// Raw bytes of the last call.
    raw_bytes: u64,
    passing: bool,
    since_probe: u32,
    /// A push's lossy call left an error buffer that no call has carried
    /// since.
    owes_error: bool,
    /// A pull crossed raw since its replica last moved.
    replica_behind: bool,
    /// The rate and its group's break-even at the last decision, for
    /// operators.
    rate: Option<f64>,
    break_even: f64,
}

/// What an operator sees of one tensor's decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PayoffView {
    /// Whether it passes raw now.
    pub passing: bool,
    /// The link's rate at the last decision, bytes per second.
    pub rate: Option<f64>,
    /// The break-even rate of its requester's tensors of its direction
    /// together, bytes per second.
    pub break_even: f64,
}

/// Every tensor's payoff on the holder side.
#[derive(Debug)]
pub struct Payoffs {
    table: Mutex<Table>,
    explored: Mutex<Bounded<Requester, Instant>>,
    to_raw: AtomicU64,
    to_compressed: AtomicU64,
    settles: AtomicU64,
}

impl Default for Payoffs {
    fn default() -> Self {
        Payoffs {
            table: Mutex::new(Table {
                tensors: Bounded::new(MAX_TENSORS),
                groups: Bounded::new(MAX_REQUESTERS),
            }),
            explored: Mutex::new(Bounded::new(MAX_REQUESTERS)),
            to_raw: AtomicU64::new(0),
            to_compressed: AtomicU64::new(0),
            settles: AtomicU64::new(0),
        }
    }
}

impl Payoffs {
    /// Whether to compress the tensor of `key` now, over a link as `link`
    /// says, under `settings`. A tensor never compressed yet is
    /// compressed: its costs are not known.
    pub fn verdict(
        &self,
        key: &PayoffKey,
        link: LinkNow,
        settings: &Link,
        now: Instant,
    ) -> Verdict {
        if !settings.adaptive() {
            return Verdict::Compress;
        }
        let mut table = lock(&self.table);
        let Table { tensors, groups } = &mut *table;
        let Some(payoff) = tensors.get_mut(key) else {
            return Verdict::Compress;
        };
        let verdict = match settings.assumed_rate.or(link.rate) {
            Some(rate) => {
                let groups = groups.get_or_insert_with(&key.requester_of(), Groups::default);
                self.by_rate(groups.of(key.direction), payoff, rate, link, settings)
            }
            None => {
                let raw_bytes = payoff.raw_bytes;
                self.explore_or_compress(&key.requester_of(), raw_bytes, now)
            }
        };
        keep_memory_whole(payoff, key.direction, verdict)
    }

    /// The verdict for a tensor whose costs are known, in `group`, on a
    /// link of `rate` bytes per second.
    fn by_rate(
        &self,
        group: &mut Group,
        payoff: &mut Payoff,
        rate: f64,
        link: LinkNow,
        settings: &Link,
    ) -> Verdict {
        let break_even = group.break_even(link.decode_ps_per_byte);
        payoff.rate = Some(rate);
        payoff.break_even = break_even;
        if group.passing && rate < break_even {
            group.passing = false;
            self.to_compressed.fetch_add(1, Ordering::Relaxed);
        } else if !group.passing && rate > settings.margin * break_even {
            group.passing = true;
            self.to_raw.fetch_add(1, Ordering::Relaxed);
        }
        payoff.passing = group.passing;
        if !group.passing {
            return Verdict::Compress;
        }
        payoff.since_probe += 1;
        if payoff.since_probe >= PROBE_EVERY {
            payoff.since_probe = 0;
            return Verdict::Probe;
        }
        Verdict::Pass
    }

    /// That the tensor of `key` crossed exactly through its memory (a
    /// [`Verdict::Settle`]): nothing is owed to the requester any more.
    pub fn settled(&self, key: &PayoffKey) {
        self.made_current(key);
        self.settles.fetch_add(1, Ordering::Relaxed);
    }

    /// That the tensor of `key` crossed in a way that left its memory
    /// current (a keyframe) but whose cost and saving stand for nothing
    /// that follows, so they are not recorded.
    pub fn made_current(&self, key: &PayoffKey) {
        if let Some(payoff) = lock(&self.table).tensors.get_mut(key) {
            payoff.owes_error = false;
            payoff.replica_behind = false;
        }
    }

    /// Without a rate: a tensor of `raw_bytes` for `requester` goes raw if
    /// its size suits timing the link and none went lately.
    fn explore_or_compress(&self, requester: &Requester, raw_bytes: u64, now: Instant) -> Verdict {
        if !EXPLORE_BYTES.contains(&raw_bytes) {
            return Verdict::Compress;
        }
        let mut explored = lock(&self.explored);
        let last = explored.get_or_insert_with(requester, || now - EXPLORE_EVERY * 2);
        if now.saturating_duration_since(*last) < EXPLORE_EVERY {
            return Verdict::Compress;
        }
        *last = now;
        Verdict::Explore
    }

    /// Takes one compression of the tensor of `key`: `raw_bytes` became
    /// `wire_bytes` in `took` (all of it: parsing the answer, encoding,
    /// rebuilding it).
    pub fn record(&self, key: &PayoffKey, raw_bytes: usize, wire_bytes: usize, took: Duration) {
        if raw_bytes == 0 {
            return;
        }
        let encode = took.as_secs_f64() * 1e12 / raw_bytes as f64;
        let saved = 1.0 - wire_bytes as f64 / raw_bytes as f64;
        let mut table = lock(&self.table);
        let Table { tensors, groups } = &mut *table;
        let mut first = false;
        let payoff = tensors.get_or_insert_with(key, || {
            first = true;
            Payoff::default()
        });
        let group = groups
            .get_or_insert_with(&key.requester_of(), Groups::default)
            .of(key.direction);
        group.count(payoff, -1.0);
        if first {
            payoff.encode_ps_per_byte = encode;
            payoff.saved = saved;
        } else {
            payoff.encode_ps_per_byte += (encode - payoff.encode_ps_per_byte) / 4.0;
            payoff.saved += (saved - payoff.saved) / 4.0;
        }
        payoff.raw_bytes = raw_bytes as u64;
        group.count(payoff, 1.0);
        // Lossy or not, this call moved the tensor's memory: a push's
        // buffer may hold error now, a pull's replica is current.
        payoff.owes_error = key.direction == Direction::Push;
        payoff.replica_behind = false;
    }

    /// What an operator sees of every tensor's decision.
    pub fn views(&self) -> Vec<(PayoffKey, PayoffView)> {
        lock(&self.table)
            .tensors
            .iter()
            .map(|(key, p)| {
                let view = PayoffView {
                    passing: p.passing,
                    rate: p.rate,
                    break_even: p.break_even,
                };
                (key.clone(), view)
            })
            .collect()
    }

    /// Times a tensor switched to raw, and back to compressed.
    pub fn switches(&self) -> (u64, u64) {
        (
            self.to_raw.load(Ordering::Relaxed),
            self.to_compressed.load(Ordering::Relaxed),
        )
    }

    /// Calls that crossed exactly through a tensor's memory.
    pub fn settles(&self) -> u64 {
        self.settles.load(Ordering::Relaxed)
    }
}

/// `verdict` as it may go without leaving the tensor's memory behind: a
/// push that owes error settles instead of crossing raw, a pull whose
/// replica is behind settles before it is compressed (and a probe it
/// stood for comes next).
fn keep_memory_whole(payoff: &mut Payoff, direction: Direction, verdict: Verdict) -> Verdict {
    let raw = matches!(verdict, Verdict::Pass | Verdict::Explore);
    match direction {
        Direction::Push if raw && payoff.owes_error => Verdict::Settle,
        Direction::Pull if raw => {
            payoff.replica_behind = true;
            verdict
        }
        Direction::Pull if payoff.replica_behind => {
            if verdict == Verdict::Probe {
                payoff.since_probe = PROBE_EVERY - 1;
            }
            Verdict::Settle
        }
        _ => verdict,
    }
}

#[cfg(test)]
mod tests;
