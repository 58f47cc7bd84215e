//! Counters of what the sidecar did, read by logs, tests and (later) the
//! metrics endpoint.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::policy::Direction;

/// Totals for one direction.
#[derive(Debug, Default)]
pub struct DirectionStats {
    /// Tensors sent compressed.
    pub compressed: AtomicU64,
    /// Their size as f32, in bytes.
    pub raw_bytes: AtomicU64,
    /// Their size on the wire (envelopes), in bytes.
    pub wire_bytes: AtomicU64,
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
    /// Responses passed through unchanged, by reason.
    passed: Mutex<BTreeMap<&'static str, u64>>,
}

impl Stats {
    /// The counters of a direction.
    pub fn direction(&self, direction: Direction) -> &DirectionStats {
        match direction {
            Direction::Push => &self.push,
            Direction::Pull => &self.pull,
        }
    }

    /// Counts one compressed tensor.
    pub fn compressed(&self, direction: Direction, raw: usize, wire: usize) {
        let d = self.direction(direction);
        d.compressed.fetch_add(1, Ordering::Relaxed);
        d.raw_bytes.fetch_add(raw as u64, Ordering::Relaxed);
        d.wire_bytes.fetch_add(wire as u64, Ordering::Relaxed);
    }

    /// Counts one response passed through for `reason`.
    pub fn passed(&self, reason: &'static str) {
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        *passed.entry(reason).or_default() += 1;
    }

    /// Pass-throughs so far, by reason.
    pub fn passed_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One line with every counter, for the log at shutdown.
    pub fn summary(&self) -> String {
        let direction = |name: &str, d: &DirectionStats| {
            let (raw, wire) = (Stats::get(&d.raw_bytes), Stats::get(&d.wire_bytes));
            let ratio = if wire == 0 {
                0.0
            } else {
                raw as f64 / wire as f64
            };
            format!(
                "{name}: tensors={} raw_bytes={raw} wire_bytes={wire} ratio={ratio:.1}",
                Stats::get(&d.compressed)
            )
        };
        format!(
            "{}; {}; restored={} decode_failures={} fallbacks={} fallbacks_served={} passed={:?}",
            direction("push", &self.push),
            direction("pull", &self.pull),
            Stats::get(&self.restored),
            Stats::get(&self.decode_failures),
            Stats::get(&self.fallbacks),
            Stats::get(&self.fallbacks_served),
            self.passed_by_reason(),
        )
    }

    /// Shorthand for an atomic's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
