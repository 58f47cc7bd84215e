//! The requester's side of the link decision: how fast each holder's
//! answers arrive here, and what decoding costs here. Both go to the holder
//! in every request (`tlc-link`), which decides per tensor.
//!
//! One sample is one burst: the answers of a step, which arrive together.
//! Its rate is their bytes over the time during which any of them was
//! arriving (from each answer's head to the end of its body), so answers
//! that share the link are counted once, and the time a holder spends
//! computing before it answers is not counted at all. A burst closes when
//! an answer begins after every earlier one has ended (the link rested),
//! or after [`MAX_BURST`] on a link that never rests.
//!
//! Only bursts of mostly raw answers make samples, and a sample is
//! trusted for [`RAW_TRUST`]. A token-bucket link (Linux `tbf`, cloud
//! egress shaping) lets a burst's allowance through at the wire's speed,
//! so a step's few compressed bytes look far faster than the link is:
//! believed, they sent tensors raw over a slow link until the first raw
//! burst showed its rate. With no fresh sample the holder compresses and
//! now and then sends one tensor raw to time the link (see
//! `payoff.rs`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tlc_context::table::lock;
use tlc_wire::peer::LinkHeader;

use crate::training::bounded::Bounded;

/// Answers smaller than this are not timed: their time is the call's, not
/// the link's.
pub const MIN_TIMED: u64 = 16 << 10;
/// Bursts smaller than this make no sample.
pub const MIN_BURST: u64 = 64 << 10;
/// A burst on a link that never rests closes after this long.
pub const MAX_BURST: Duration = Duration::from_millis(250);
/// Samples kept per holder; the rate is their median.
const SAMPLES: usize = 9;
/// How long a sample is trusted.
pub const RAW_TRUST: Duration = Duration::from_secs(300);
/// Holders remembered at most (a job's tasks; more only under attack).
const MAX_HOLDERS: usize = 4096;
/// Shortest busy time taken for a burst: on loopback a body can be in the
/// socket before its head is read.
const MIN_BUSY: Duration = Duration::from_micros(10);

/// One answer from a holder, as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// When its head arrived.
    pub head: Instant,
    /// When the last byte of its body arrived.
    pub end: Instant,
    /// Bytes of its body.
    pub bytes: u64,
    /// Whether it came as TensorFlow wrote it (not an envelope).
    pub raw: bool,
}

/// Answers arriving together, not yet a sample.
#[derive(Debug, Clone, Copy)]
struct Burst {
    started: Instant,
    busy_until: Instant,
    busy: Duration,
    bytes: u64,
    raw_bytes: u64,
}

/// What is known of one holder's link.
#[derive(Debug, Default)]
struct HolderLink {
    burst: Option<Burst>,
    /// Rates of mostly raw bursts, with when they closed.
    raw: VecDeque<(f64, Instant)>,
}

impl HolderLink {
    /// Takes `answer` into the open burst, or closes that and opens a new
    /// one. An answer too small to time only closes a burst.
    fn record(&mut self, answer: Answer, timed: bool) {
        if let Some(burst) = self.burst {
            let rested = answer.head > burst.busy_until;
            let long = answer.end.saturating_duration_since(burst.started) > MAX_BURST;
            if rested || long {
                self.burst = None;
                self.close(burst, answer.head);
            }
        }
        if !timed {
            return;
        }
        let raw_bytes = if answer.raw { answer.bytes } else { 0 };
        match &mut self.burst {
            Some(burst) => {
                let from = answer.head.max(burst.busy_until);
                burst.busy += answer.end.saturating_duration_since(from);
                burst.busy_until = burst.busy_until.max(answer.end);
                burst.bytes += answer.bytes;
                burst.raw_bytes += raw_bytes;
            }
            None => {
                self.burst = Some(Burst {
                    started: answer.head,
                    busy_until: answer.end,
                    busy: answer.end.saturating_duration_since(answer.head),
                    bytes: answer.bytes,
                    raw_bytes,
                })
            }
        }
    }

    fn close(&mut self, burst: Burst, now: Instant) {
        if burst.bytes < MIN_BURST {
            return;
        }
        let rate = burst.bytes as f64 / burst.busy.max(MIN_BUSY).as_secs_f64();
        if burst.raw_bytes * 2 <= burst.bytes {
            // Mostly compressed: its speed may be a token bucket's.
            return;
        }
        if self.raw.len() == SAMPLES {
            self.raw.pop_front();
        }
        self.raw.push_back((rate, now));
    }

    /// The median of the fresh samples, if there is one.
    fn rate(&self, now: Instant) -> Option<f64> {
        let fresh: Vec<f64> = self
            .raw
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(*at) < RAW_TRUST)
            .map(|(rate, _)| *rate)
            .collect();
        (!fresh.is_empty()).then(|| median(fresh))
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The requester side's measurements, shared by every call.
#[derive(Debug)]
pub struct LinkMeter {
    holders: Mutex<Bounded<String, HolderLink>>,
    /// Decode cost, picoseconds per raw byte (moving average), 0 before
    /// the first.
    decode_ps_per_byte: Mutex<f64>,
}

impl Default for LinkMeter {
    fn default() -> Self {
        LinkMeter {
            holders: Mutex::new(Bounded::new(MAX_HOLDERS)),
            decode_ps_per_byte: Mutex::new(0.0),
        }
    }
}

impl LinkMeter {
    /// Takes one answer from `holder` (a task name) into its link's
    /// samples. Answers under [`MIN_TIMED`] bytes are not timed, but one
    /// that begins after the others ended still closes their burst.
    pub fn record(&self, holder: &str, answer: Answer) {
        if answer.end < answer.head {
            return;
        }
        let timed = answer.bytes >= MIN_TIMED;
        let mut holders = lock(&self.holders);
        if timed {
            holders
                .get_or_insert_with(holder, HolderLink::default)
                .record(answer, true);
        } else if let Some(link) = holders.get_mut(holder) {
            link.record(answer, false);
        }
    }

    /// Takes the time one envelope took to decode into `raw_bytes`.
    pub fn record_decode(&self, raw_bytes: usize, took: Duration) {
        if raw_bytes < MIN_TIMED as usize {
            return;
        }
        let sample = took.as_secs_f64() * 1e12 / raw_bytes as f64;
        let mut average = lock(&self.decode_ps_per_byte);
        *average = if *average == 0.0 {
            sample
        } else {
            *average + (sample - *average) / 8.0
        };
    }

    /// The rate `holder`'s answers arrive at, bytes per second, if known.
    pub fn rate(&self, holder: &str, now: Instant) -> Option<f64> {
        lock(&self.holders)
            .get_mut(holder)
            .and_then(|link| link.rate(now))
    }

    /// What the next request to `holder` tells it (`tlc-link`).
    pub fn header(&self, holder: &str, now: Instant) -> LinkHeader {
        LinkHeader {
            rate: self
                .rate(holder, now)
                .map_or(0, |rate| rate.max(1.0) as u64),
            decode_ps_per_byte: *lock(&self.decode_ps_per_byte) as u64,
        }
    }

    /// Every holder whose rate is known, with it, sorted by name.
    pub fn rates(&self, now: Instant) -> Vec<(String, f64)> {
        let holders = lock(&self.holders);
        let mut rates: Vec<(String, f64)> = holders
            .iter()
            .filter_map(|(holder, link)| Some((holder.clone(), link.rate(now)?)))
            .collect();
        rates.sort_by(|a, b| a.0.cmp(&b.0));
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn answer(at: Instant, from_ms: u64, to_ms: u64, bytes: u64, raw: bool) -> Answer {
        Answer {
            head: at + Duration::from_millis(from_ms),
            end: at + Duration::from_millis(to_ms),
            bytes,
            raw,
        }
    }

    #[test]
    fn overlapping_answers_of_a_step_are_one_sample() {
        let meter = LinkMeter::default();
        let t = Instant::now();
        // Step 1: two answers sharing the link, 2 MB over 200 ms busy.
        meter.record("ps", answer(t, 0, 150, MB, true));
        meter.record("ps", answer(t, 50, 200, MB, true));
        assert_eq!(meter.rate("ps", t), None, "the burst is still open");
        // Step 2 begins after a rest: step 1 closes at 10 MB/s.
        meter.record("ps", answer(t, 1000, 1100, MB, true));
        let rate = meter.rate("ps", t + Duration::from_secs(1)).unwrap();
        assert!((rate - 2.0 * MB as f64 / 0.2).abs() < 1.0, "{rate}");
        assert_eq!(meter.rates(t).len(), 1);
        assert_eq!(meter.rate("worker", t), None);
    }

    #[test]
    fn small_answers_and_bursts_make_no_sample() {
        let meter = LinkMeter::default();
        let t = Instant::now();
        for step in 0..10 {
            let at = step * 1000;
            // Untimed: under 16 KiB.
            meter.record("ps", answer(t, at, at + 100, MIN_TIMED - 1, true));
            // Timed, but a 32 KiB burst.
            meter.record("ps", answer(t, at, at + 100, 32 << 10, true));
        }
        assert_eq!(meter.rate("ps", t + Duration::from_secs(20)), None);
    }

    #[test]
    fn a_small_answer_after_a_rest_closes_the_burst() {
        let meter = LinkMeter::default();
        let t = Instant::now();
        meter.record("ps", answer(t, 0, 100, MB, true));
        meter.record("ps", answer(t, 1000, 1001, 100, false));
        assert!(meter.rate("ps", t).is_some());
    }

    #[test]
    fn only_raw_bursts_are_samples_and_only_while_fresh() {
        let meter = LinkMeter::default();
        let t = Instant::now();
        // Compressed bursts at 100 MB/s (a token bucket's allowance).
        for step in 0..5u64 {
            meter.record(
                "ps",
                answer(t, step * 1000, step * 1000 + 1, 100 << 10, false),
            );
        }
        assert_eq!(meter.rate("ps", t), None, "compressed bursts say nothing");
        // One raw burst at 1 MB/s, closed by the next answer.
        meter.record("ps", answer(t, 6000, 7000, MB, true));
        meter.record("ps", answer(t, 8000, 8001, 100 << 10, false));
        let at = t + Duration::from_secs(8);
        let slow = meter.rate("ps", at).unwrap();
        assert!((slow - MB as f64).abs() < 1.0, "{slow}");
        // Past its trust, nothing is known again.
        assert_eq!(meter.rate("ps", at + RAW_TRUST), None);
    }

    #[test]
    fn a_link_that_never_rests_still_gives_samples() {
        let meter = LinkMeter::default();
        let t = Instant::now();
        for i in 0..20u64 {
            // Each answer begins before the last ends: no rest, ever.
            meter.record("ps", answer(t, i * 100, i * 100 + 150, MB, true));
        }
        let rate = meter.rate("ps", t + Duration::from_secs(3)).unwrap();
        assert!((rate - MB as f64 / 0.1).abs() / rate < 0.3, "{rate}");
    }

    #[test]
    fn decode_cost_is_a_moving_average_and_travels_in_the_header() {
        let meter = LinkMeter::default();
        assert_eq!(meter.header("ps", Instant::now()), LinkHeader::default());
        meter.record_decode(1 << 20, Duration::from_micros(1048)); // ~1000 ps/B
        meter.record_decode(100, Duration::from_secs(1)); // too small: ignored
        let header = meter.header("ps", Instant::now());
        assert!(
            (995..=1000).contains(&header.decode_ps_per_byte),
            "{header:?}"
        );
        assert_eq!(header.rate, 0);
    }
}
