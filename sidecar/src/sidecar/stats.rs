//! Counters of what the sidecar did, read by logs, tests, the admin API
//! and the metrics endpoint.
//!
//! The plain totals (per direction, restored, fallbacks, pass-throughs)
//! are what the shutdown log line and the admin API report; the labelled
//! series of the metrics endpoint ([`Families`]) are updated by the same
//! calls, so the two never disagree.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tlc_codec::CodecId;

use crate::counters::Families;
use tlc_core::Direction;
use tlc_core::Outcome;
use tlc_core::Role;
use tlc_core::TensorClass;

/// The compression ratio `raw / wire`, 0 while nothing was sent.
pub fn ratio(raw: u64, wire: u64) -> f64 {
    if wire == 0 {
        0.0
    } else {
        raw as f64 / wire as f64
    }
}

/// Totals for one direction.
#[derive(Debug, Default)]
pub struct DirectionStats {
    /// Tensors sent compressed.
    pub compressed: AtomicU64,
    /// Their size as f32, in bytes.
    pub raw_bytes: AtomicU64,
    /// Their size on the wire (envelopes), in bytes.
    pub wire_bytes: AtomicU64,
    /// Refinement passes sent with them: further 3LC frames (pushes) or
    /// versions (pulls) over what the first pass left.
    pub refinements: AtomicU64,
}

/// Pass-throughs of one reason.
#[derive(Debug, Clone, Copy, Default)]
struct Passed {
    /// Responses passed.
    responses: u64,
    /// Body bytes of those the sidecar read; `None` while none was.
    bytes: Option<u64>,
}

/// Everything counted, by the sidecar that holds the tensors (encoding) or
/// the one that asked for them (decoding).
#[derive(Debug, Default)]
pub struct Stats {
    /// Encoding side, gradients.
    pub push: DirectionStats,
    /// Encoding side, model values.
    pub pull: DirectionStats,
    /// Decoding side: envelopes turned back into tensors.
    pub restored: AtomicU64,
    /// Decoding side: envelopes that could not be used.
    pub decode_failures: AtomicU64,
    /// Decoding side: original responses fetched after a failure.
    pub fallbacks: AtomicU64,
    /// Encoding side: fallback requests answered.
    pub fallbacks_served: AtomicU64,
    /// Encoding side: pull replicas reset because they drifted too far
    /// from the model.
    pub drift_resets: AtomicU64,
    /// Connections of every listener.
    pub connections: tlc_proxy::connection::ConnectionStats,
    /// Responses passed through unchanged, by reason.
    passed: Mutex<BTreeMap<&'static str, Passed>>,
    /// The labelled series only the metrics endpoint shows.
    families: Families,
}

impl Stats {
    /// The counters of a direction.
    pub fn direction(&self, direction: Direction) -> &DirectionStats {
        match direction {
            Direction::Push => &self.push,
            Direction::Pull => &self.pull,
        }
    }

    /// Counts one compressed tensor: `raw` bytes as f32 sent as `wire`
    /// bytes with `codec` (the policy's choice), encoded in `took`.
    pub fn compressed(
        &self,
        direction: Direction,
        codec: CodecId,
        class: TensorClass,
        raw: usize,
        wire: usize,
        took: Duration,
    ) {
        let d = self.direction(direction);
        d.compressed.fetch_add(1, Ordering::Relaxed);
        d.raw_bytes.fetch_add(raw as u64, Ordering::Relaxed);
        d.wire_bytes.fetch_add(wire as u64, Ordering::Relaxed);
        self.families
            .encoded(direction, codec, class, raw, wire, took);
    }

    /// Counts one envelope restored for TensorFlow, decoded in `took`;
    /// `codec` is its first frame's.
    pub fn decoded(&self, direction: Direction, codec: CodecId, took: Duration) {
        self.restored.fetch_add(1, Ordering::Relaxed);
        self.families.decoded(direction, codec, took);
    }

    /// Counts one envelope that could not be restored.
    pub fn decode_failed(&self, direction: Direction) {
        self.decode_failures.fetch_add(1, Ordering::Relaxed);
        self.families.decode_failed(direction);
    }

    /// Counts one original response fetched after a decode failure.
    pub fn fallback_fetched(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `passes` refinement passes sent in `direction`.
    pub fn refined(&self, direction: Direction, passes: u64) {
        self.direction(direction)
            .refinements
            .fetch_add(passes, Ordering::Relaxed);
    }

    /// Counts one pull replica reset for drifting too far.
    pub fn drift_reset(&self) {
        self.drift_resets.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one fallback request answered.
    pub fn fallback_served(&self) {
        self.fallbacks_served.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one pull keyframe served (holder) or applied (requester).
    pub fn keyframe(&self, side: Role) {
        self.families.keyframe(side);
    }

    /// Counts one `RecvTensor` call through a listener of `role`, from the
    /// request reaching the sidecar to the response head, `took` long.
    pub fn recv_tensor(&self, role: Role, outcome: Outcome, took: Duration) {
        self.families.recv_tensor(role, outcome, took);
    }

    /// Counts one configuration reload: applied (`ok`) or refused.
    pub fn config_reloaded(&self, ok: bool) {
        self.families.config_reloaded(ok);
    }

    /// The labelled series, for the metrics endpoint.
    pub fn families(&self) -> &Families {
        &self.families
    }

    /// Counts one response passed through for `reason`, streamed on
    /// unread (its size is not known).
    pub fn passed(&self, reason: &'static str) {
        self.count_passed(reason, None);
    }

    /// Counts one response of `bytes` body bytes that the sidecar read and
    /// then passed through for `reason`.
    pub fn passed_read(&self, reason: &'static str, bytes: u64) {
        self.count_passed(reason, Some(bytes));
    }

    fn count_passed(&self, reason: &'static str, bytes: Option<u64>) {
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        let entry = passed.entry(reason).or_default();
        entry.responses += 1;
        if let Some(bytes) = bytes {
            *entry.bytes.get_or_insert(0) += bytes;
        }
    }

    /// Body bytes of the pass-throughs measured so far, by reason (only
    /// reasons whose responses were read).
    pub fn passed_bytes_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|(reason, p)| Some((*reason, p.bytes?)))
            .collect()
    }

    /// Pass-throughs so far, by reason.
    pub fn passed_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(reason, p)| (*reason, p.responses))
            .collect()
    }

    /// One line with every counter, for the log at shutdown.
    pub fn summary(&self) -> String {
        let direction = |name: &str, d: &DirectionStats| {
            let (raw, wire) = (Stats::get(&d.raw_bytes), Stats::get(&d.wire_bytes));
            format!(
                "{name}: tensors={} raw_bytes={raw} wire_bytes={wire} ratio={:.1} refinements={}",
                Stats::get(&d.compressed),
                ratio(raw, wire),
                Stats::get(&d.refinements),
            )
        };
        format!(
            "{}; {}; restored={} decode_failures={} fallbacks={} fallbacks_served={} drift_resets={} passed_bytes={} passed={:?}",
            direction("push", &self.push),
            direction("pull", &self.pull),
            Stats::get(&self.restored),
            Stats::get(&self.decode_failures),
            Stats::get(&self.fallbacks),
            Stats::get(&self.fallbacks_served),
            Stats::get(&self.drift_resets),
            self.passed_bytes_by_reason().values().sum::<u64>(),
            self.passed_by_reason(),
        )
    }

    /// Shorthand for an atomic's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_keeps_the_format_scripts_parse() {
        let stats = Stats::default();
        let ms = Duration::from_millis(1);
        stats.compressed(
            Direction::Push,
            CodecId::ThreeLc,
            TensorClass::DenseGradient,
            4000,
            100,
            ms,
        );
        stats.compressed(
            Direction::Pull,
            CodecId::Int8,
            TensorClass::DenseRead,
            800,
            200,
            ms,
        );
        stats.refined(Direction::Pull, 3);
        stats.decoded(Direction::Pull, CodecId::Int8, ms);
        stats.decode_failed(Direction::Push);
        stats.fallback_fetched();
        stats.fallback_served();
        stats.fallback_served();
        stats.passed("small");
        stats.passed_read("small", 300);
        stats.passed("policy_skip");
        assert_eq!(
            stats.summary(),
            "push: tensors=1 raw_bytes=4000 wire_bytes=100 ratio=40.0 refinements=0; \
             pull: tensors=1 raw_bytes=800 wire_bytes=200 ratio=4.0 refinements=3; \
             restored=1 decode_failures=1 fallbacks=1 fallbacks_served=2 drift_resets=0 \
             passed_bytes=300 passed={\"policy_skip\": 1, \"small\": 2}"
        );
    }
}
