//! The holder's side of the link decision: for each tensor and requester,
//! what compressing it costs (encode here, decode there) and saves (the
//! share of its bytes), and so the link rate above which sending it raw is
//! faster: its break-even rate.
//!
//! Sending `n` raw bytes over a link of rate `r` takes `n / r`; compressed,
//! it takes `n (1 − saved) / r` plus `n (encode + decode)` per byte. So
//! compressing pays while `r < saved / (encode + decode)`. A tensor passes
//! raw once the link is [`Link::margin`] times faster than that, and is
//! compressed again as soon as the link is slower than break-even. While
//! it passes, one call in [`PROBE_EVERY`] is still compressed, so its cost
//! and saving stay current and its memory (an error buffer, a replica)
//! keeps up with the model.
//!
//! Before a requester knows its link's rate, a tensor of 64 to 256 KiB
//! crosses raw now and then ([`Verdict::Explore`]): compressed answers
//! alone may be too small to time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tlc_context::table::lock;
use tlc_core::Direction;

use crate::policy::Link;
use crate::training::bounded::Bounded;

/// While a tensor passes, one call in this many is compressed.
pub const PROBE_EVERY: u32 = 64;
/// Tensors (per requester and direction) remembered at most.
const MAX_TENSORS: usize = 1 << 16;
/// Requesters remembered for exploring at most.
const MAX_REQUESTERS: usize = 4096;
/// Sizes of the tensors sent raw to let a requester time its link.
const EXPLORE_BYTES: std::ops::RangeInclusive<u64> = (64 << 10)..=(256 << 10);
/// At most one tensor sent raw to explore per requester this often.
pub const EXPLORE_EVERY: Duration = Duration::from_secs(2);

/// Which tensor, to which requester.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayoffKey {
    /// The requesting task.
    pub requester: String,
    /// Push or pull.
    pub direction: Direction,
    /// The tensor's context name.
    pub tensor: String,
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
}

/// What the two sides know of the link now.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkNow {
    /// Bytes per second, if known.
    pub rate: Option<f64>,
    /// The requester's decode cost, picoseconds per byte, if known.
    pub decode_ps_per_byte: Option<f64>,
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
    /// The rate and break-even of the last decision, for operators.
    rate: Option<f64>,
    break_even: f64,
}

impl Payoff {
    /// Bytes per second below which compressing pays.
    fn break_even(&self, decode_ps_per_byte: Option<f64>) -> f64 {
        // A requester that has not decoded yet: take its cost as ours.
        let decode = decode_ps_per_byte.unwrap_or(self.encode_ps_per_byte);
        let cost = (self.encode_ps_per_byte + decode) * 1e-12;
        if self.saved <= 0.0 {
            0.0
        } else if cost <= 0.0 {
            f64::INFINITY
        } else {
            self.saved / cost
        }
    }
}

/// What an operator sees of one tensor's decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PayoffView {
    /// Whether it passes raw now.
    pub passing: bool,
    /// The link's rate at the last decision, bytes per second.
    pub rate: Option<f64>,
    /// Its break-even rate, bytes per second.
    pub break_even: f64,
}

/// Every tensor's payoff on the holder side.
#[derive(Debug)]
pub struct Payoffs {
    tensors: Mutex<Bounded<PayoffKey, Payoff>>,
    explored: Mutex<Bounded<String, Instant>>,
    to_raw: AtomicU64,
    to_compressed: AtomicU64,
}

impl Default for Payoffs {
    fn default() -> Self {
        Payoffs {
            tensors: Mutex::new(Bounded::new(MAX_TENSORS)),
            explored: Mutex::new(Bounded::new(MAX_REQUESTERS)),
            to_raw: AtomicU64::new(0),
            to_compressed: AtomicU64::new(0),
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
        let mut tensors = lock(&self.tensors);
        let Some(payoff) = tensors.get_mut(key) else {
            return Verdict::Compress;
        };
        let Some(rate) = settings.assumed_rate.or(link.rate) else {
            let raw_bytes = payoff.raw_bytes;
            drop(tensors);
            return self.explore_or_compress(&key.requester, raw_bytes, now);
        };
        let break_even = payoff.break_even(link.decode_ps_per_byte);
        payoff.rate = Some(rate);
        payoff.break_even = break_even;
        if payoff.passing {
            if rate < break_even {
                payoff.passing = false;
                self.to_compressed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Compress;
            }
            payoff.since_probe += 1;
            if payoff.since_probe >= PROBE_EVERY {
                payoff.since_probe = 0;
                return Verdict::Probe;
            }
            return Verdict::Pass;
        }
        if rate > settings.margin * break_even {
            payoff.passing = true;
            payoff.since_probe = 0;
            self.to_raw.fetch_add(1, Ordering::Relaxed);
            return Verdict::Pass;
        }
        Verdict::Compress
    }

    /// Without a rate: a tensor of `raw_bytes` for `requester` goes raw if
    /// its size suits timing the link and none went lately.
    fn explore_or_compress(&self, requester: &String, raw_bytes: u64, now: Instant) -> Verdict {
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
        let mut tensors = lock(&self.tensors);
        let mut first = false;
        let payoff = tensors.get_or_insert_with(key, || {
            first = true;
            Payoff::default()
        });
        if first {
            payoff.encode_ps_per_byte = encode;
            payoff.saved = saved;
        } else {
            payoff.encode_ps_per_byte += (encode - payoff.encode_ps_per_byte) / 4.0;
            payoff.saved += (saved - payoff.saved) / 4.0;
        }
        payoff.raw_bytes = raw_bytes as u64;
    }

    /// What an operator sees of every tensor's decision.
    pub fn views(&self) -> Vec<(PayoffKey, PayoffView)> {
        lock(&self.tensors)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{LinkMode, LinkSettings};

    /// `[policy.link] mode = "auto"` with its default margin.
    fn auto() -> Link {
        Link {
            mode: LinkMode::Auto,
            ..Link::default()
        }
    }

    fn key() -> PayoffKey {
        PayoffKey {
            requester: "/job:worker/replica:0/task:0".into(),
            direction: Direction::Pull,
            tensor: "w".into(),
        }
    }

    fn at(rate: f64) -> LinkNow {
        LinkNow {
            rate: Some(rate),
            decode_ps_per_byte: Some(500.0),
        }
    }

    /// 1 MB encoded in 0.5 ms (500 ps/B) to 1/32 of it: with a 500 ps/B
    /// decode, break-even is 0.97 / 1e-9 = 969 MB/s.
    fn learned(payoffs: &Payoffs) {
        payoffs.record(&key(), 1 << 20, 1 << 15, Duration::from_nanos(524_288));
    }

    #[test]
    fn passes_above_margin_times_break_even_and_returns_below_it() {
        let payoffs = Payoffs::default();
        let link = auto();
        let now = Instant::now();
        assert_eq!(
            payoffs.verdict(&key(), at(1e12), &link, now),
            Verdict::Compress,
            "costs unknown"
        );
        learned(&payoffs);
        // 10 Mbit/s: compress.
        assert_eq!(
            payoffs.verdict(&key(), at(1.25e6), &link, now),
            Verdict::Compress
        );
        // 2x break-even: inside the margin, still compressing.
        assert_eq!(
            payoffs.verdict(&key(), at(2e9), &link, now),
            Verdict::Compress
        );
        // 4x: pass, and stay passing down to break-even.
        assert_eq!(payoffs.verdict(&key(), at(4e9), &link, now), Verdict::Pass);
        assert_eq!(payoffs.verdict(&key(), at(1e9), &link, now), Verdict::Pass);
        assert_eq!(payoffs.switches(), (1, 0));
        let (_, view) = payoffs.views().pop().unwrap();
        assert!(
            view.passing && (view.break_even - 0.969e9).abs() < 0.01e9,
            "{view:?}"
        );
        // Below break-even: compressed again.
        assert_eq!(
            payoffs.verdict(&key(), at(0.9e9), &link, now),
            Verdict::Compress
        );
        assert_eq!(payoffs.switches(), (1, 1));
    }

    #[test]
    fn a_passing_tensor_is_probed_once_in_sixty_four() {
        let payoffs = Payoffs::default();
        learned(&payoffs);
        let link = auto();
        let now = Instant::now();
        let verdicts: Vec<Verdict> = (0..=PROBE_EVERY * 2)
            .map(|_| payoffs.verdict(&key(), at(1e11), &link, now))
            .collect();
        let probes = verdicts.iter().filter(|v| **v == Verdict::Probe).count();
        assert_eq!(probes, 2);
        assert_eq!(verdicts[0], Verdict::Pass);
    }

    #[test]
    fn always_and_an_assumed_rate_override_the_measurement() {
        let payoffs = Payoffs::default();
        learned(&payoffs);
        let now = Instant::now();
        let always = Link::default();
        assert_eq!(
            payoffs.verdict(&key(), at(1e12), &always, now),
            Verdict::Compress
        );
        let slow = Link::new(&LinkSettings {
            mode: LinkMode::Auto,
            assume_rate_mbit: 100,
            ..LinkSettings::default()
        })
        .unwrap();
        assert_eq!(
            payoffs.verdict(&key(), at(1e12), &slow, now),
            Verdict::Compress
        );
        let fast = Link::new(&LinkSettings {
            mode: LinkMode::Auto,
            assume_rate_mbit: 100_000,
            ..LinkSettings::default()
        })
        .unwrap();
        assert_eq!(
            payoffs.verdict(&key(), LinkNow::default(), &fast, now),
            Verdict::Pass
        );
    }

    #[test]
    fn without_a_rate_a_mid_sized_tensor_explores_every_two_seconds() {
        let payoffs = Payoffs::default();
        let link = auto();
        let now = Instant::now();
        let unknown = LinkNow::default();
        // 1 MB: too large to explore with.
        learned(&payoffs);
        assert_eq!(
            payoffs.verdict(&key(), unknown, &link, now),
            Verdict::Compress
        );
        payoffs.record(&key(), 128 << 10, 4 << 10, Duration::from_micros(60));
        assert_eq!(
            payoffs.verdict(&key(), unknown, &link, now),
            Verdict::Explore
        );
        assert_eq!(
            payoffs.verdict(&key(), unknown, &link, now),
            Verdict::Compress
        );
        let later = now + EXPLORE_EVERY;
        assert_eq!(
            payoffs.verdict(&key(), unknown, &link, later),
            Verdict::Explore
        );
    }

    #[test]
    fn a_codec_that_saves_nothing_never_pays() {
        let payoffs = Payoffs::default();
        payoffs.record(&key(), 1 << 20, 1 << 20, Duration::from_micros(100));
        let link = auto();
        assert_eq!(
            payoffs.verdict(&key(), at(1e3), &link, Instant::now()),
            Verdict::Pass
        );
    }
}
