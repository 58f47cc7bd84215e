//! What the sidecar did, counted once: the one place the data path counts
//! an event, and the one snapshot every reader takes.
//!
//! Each method of [`Stats`] named after an event counts it in exactly one
//! store:
//!
//! - events with labels (a tensor encoded or decoded, a decode failure, a
//!   keyframe, a `RecvTensor` call, a reload) in the labelled series of
//!   [`Families`], which the metrics endpoint registers as they are;
//! - events only ever shown as plain numbers (refinement passes,
//!   fallbacks, drift resets, pass-throughs by reason) in plain atomics
//!   and the pass-through map here, which the metrics endpoint turns into
//!   series when scraped.
//!
//! The admin API, the shutdown log line ([`Stats::summary`]) and the
//! metrics endpoint's scrape-time series all read [`Stats::totals`]: the
//! plain totals there that have labelled series (tensors, raw and wire
//! bytes per direction, restored, decode failures) are those series
//! summed, so no two readers can disagree.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tlc_codec::CodecId;
use tlc_proxy::connection::ConnectionStats;

use super::pass::PassReason;
use crate::counters::Families;
use crate::hop::{HopCounters, HopTotals};
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

/// Pass-throughs of one reason.
#[derive(Debug, Clone, Copy, Default)]
struct Passed {
    /// Responses passed.
    responses: u64,
    /// Body bytes of those the sidecar read; `None` while none was.
    bytes: Option<u64>,
}

/// Everything counted, by the sidecar that holds the tensors (encoding) or
/// the one that asked for them (decoding). See the module's doc for where
/// each event is kept.
#[derive(Debug, Default)]
pub struct Stats {
    /// The labelled series: tensors encoded and decoded, decode failures,
    /// keyframes, calls, reloads.
    families: Families,
    /// Encoding side: refinement passes of pushes.
    push_refinements: AtomicU64,
    /// Encoding side: refinement passes of pulls.
    pull_refinements: AtomicU64,
    /// Decoding side: original responses fetched after a failure.
    fallbacks_fetched: AtomicU64,
    /// Encoding side: fallback requests answered.
    fallbacks_served: AtomicU64,
    /// Encoding side: originals dropped because the requester acknowledged
    /// their envelope.
    fallbacks_released: AtomicU64,
    /// Encoding side: pull replicas reset because they drifted too far
    /// from the model.
    drift_resets: AtomicU64,
    /// Encoding side: pull replicas brought to the model bit for bit.
    settles: AtomicU64,
    /// Encoding side: gradients encoded while their stream was critical.
    critical_pushes: AtomicU64,
    /// Encoding side: calls sent exactly by `[policy.check] exact_at_call`.
    forced_exact: AtomicU64,
    /// Decoding side: mirror checks that matched and that did not.
    mirror_checks: [AtomicU64; 2],
    /// Encoding side: ids sent again by reference: responses, their
    /// body bytes, and what went instead.
    ids_again: [AtomicU64; 3],
    /// Responses passed through unchanged, by reason.
    passed: Mutex<BTreeMap<&'static str, Passed>>,
    /// Connections of every listener, counted by the proxy.
    connections: ConnectionStats,
    /// Hop compression, both ways (shared with the bodies that count).
    hop: Arc<HopCounters>,
}

/// What one direction sent compressed (encoding side).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sent {
    /// Tensors sent compressed.
    pub tensors: u64,
    /// Their size as f32, in bytes.
    pub raw_bytes: u64,
    /// Their size on the wire (envelopes), in bytes.
    pub wire_bytes: u64,
    /// Refinement passes sent with them: further 3LC frames (pushes) or
    /// versions (pulls) over what the first pass left.
    pub refinements: u64,
}

impl Sent {
    /// `raw_bytes / wire_bytes`, 0 while nothing was sent.
    pub fn ratio(&self) -> f64 {
        ratio(self.raw_bytes, self.wire_bytes)
    }
}

/// Every plain total at one moment: what the admin API, the shutdown log
/// and the scrape-time series show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Encoding side, gradients.
    pub push: Sent,
    /// Encoding side, model values.
    pub pull: Sent,
    /// Decoding side: envelopes turned back into tensors.
    pub restored: u64,
    /// Decoding side: envelopes that could not be used.
    pub decode_failures: u64,
    /// Decoding side: original responses fetched after a failure.
    pub fallbacks: u64,
    /// Encoding side: fallback requests answered.
    pub fallbacks_served: u64,
    /// Encoding side: originals dropped once their envelope was
    /// acknowledged.
    pub fallbacks_released: u64,
    /// Encoding side: pull replicas reset for drifting too far.
    pub drift_resets: u64,
    /// Encoding side: pull replicas brought to the model bit for bit (an
    /// exact read, or a read again of a value that stopped changing).
    pub settles: u64,
    /// Encoding side: gradients encoded while their stream was in a
    /// critical regime (the fidelity controller's tighter lag bound).
    pub critical_pushes: u64,
    /// Encoding side: calls sent exactly by `[policy.check] exact_at_call`.
    pub forced_exact: u64,
    /// Decoding side: restored tensors whose hash matched the holder's
    /// (`[policy.check] mirror`).
    pub mirror_matches: u64,
    /// Decoding side: restored tensors whose hash did not (the original
    /// went to TensorFlow instead).
    pub mirror_mismatches: u64,
    /// Responses passed through unchanged, by reason.
    pub passed: BTreeMap<&'static str, u64>,
    /// Body bytes of those the sidecar read before passing them, by
    /// reason (only reasons whose responses were read).
    pub passed_bytes: BTreeMap<&'static str, u64>,
    /// Messages compressed and restored losslessly between sidecars.
    pub hop: HopTotals,
    /// Encoding side: ids sent again by reference to ids of the same step
    /// (responses, raw = their bytes, wire = what went instead).
    pub ids_again: tlc_wire::hop::Counted,
}

impl Totals {
    /// What `direction` sent compressed.
    pub fn direction(&self, direction: Direction) -> &Sent {
        match direction {
            Direction::Push => &self.push,
            Direction::Pull => &self.pull,
        }
    }
}

impl Stats {
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
        self.families
            .encoded(direction, codec, class, raw, wire, took);
    }

    /// Counts one envelope restored for TensorFlow, decoded in `took`;
    /// `codec` is its first frame's.
    pub fn decoded(&self, direction: Direction, codec: CodecId, took: Duration) {
        self.families.decoded(direction, codec, took);
    }

    /// Counts one envelope that could not be restored.
    pub fn decode_failed(&self, direction: Direction) {
        self.families.decode_failed(direction);
    }

    /// Counts one original response fetched after a decode failure.
    pub fn fallback_fetched(&self) {
        self.fallbacks_fetched.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` originals dropped because their envelopes were
    /// acknowledged.
    pub fn fallbacks_released(&self, n: usize) {
        self.fallbacks_released
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `passes` refinement passes sent in `direction`.
    pub fn refined(&self, direction: Direction, passes: u64) {
        let counter = match direction {
            Direction::Push => &self.push_refinements,
            Direction::Pull => &self.pull_refinements,
        };
        counter.fetch_add(passes, Ordering::Relaxed);
    }

    /// Counts one response of ids sent by reference: `raw` body bytes, of
    /// which `wire` went.
    pub fn ids_again(&self, raw: usize, wire: usize) {
        self.ids_again[0].fetch_add(1, Ordering::Relaxed);
        self.ids_again[1].fetch_add(raw as u64, Ordering::Relaxed);
        self.ids_again[2].fetch_add(wire as u64, Ordering::Relaxed);
    }

    /// Counts one pull replica reset for drifting too far.
    pub fn drift_reset(&self) {
        self.drift_resets.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one pull replica brought to the model bit for bit.
    pub fn settled(&self) {
        self.settles.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one gradient encoded in a critical regime.
    pub fn critical_push(&self) {
        self.critical_pushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one call sent exactly by `[policy.check] exact_at_call`.
    pub fn forced_exact(&self) {
        self.forced_exact.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one mirror check, matched or not.
    pub fn mirror_checked(&self, matched: bool) {
        self.mirror_checks[usize::from(!matched)].fetch_add(1, Ordering::Relaxed);
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

    /// Counts one response passed through for `reason`, streamed on
    /// unread (its size is not known); true for the first of its reason.
    pub fn passed(&self, reason: &PassReason) -> bool {
        self.count_passed(reason.label(), None) == 1
    }

    /// Counts one response of `bytes` body bytes that the sidecar read and
    /// then passed through for `reason`; true for the first of its reason,
    /// which a reason the operator must hear of logs.
    pub fn passed_read(&self, reason: &PassReason, bytes: u64) -> bool {
        self.count_passed(reason.label(), Some(bytes)) == 1
    }

    /// Counts one response passed for `reason`; the count so far.
    fn count_passed(&self, reason: &'static str, bytes: Option<u64>) -> u64 {
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        let entry = passed.entry(reason).or_default();
        entry.responses += 1;
        if let Some(bytes) = bytes {
            *entry.bytes.get_or_insert(0) += bytes;
        }
        entry.responses
    }

    /// The labelled series, for the metrics endpoint to register.
    pub fn families(&self) -> &Families {
        &self.families
    }

    /// Hop compression's counters, for the bodies that count as they
    /// stream.
    pub fn hop(&self) -> &Arc<HopCounters> {
        &self.hop
    }

    /// The connections of every listener (the proxy counts them).
    pub fn connections(&self) -> &ConnectionStats {
        &self.connections
    }

    /// Every plain total now. The ones with labelled series are those
    /// series summed (a lookup per label value: for readers, not for the
    /// data path).
    pub fn totals(&self) -> Totals {
        let sent = |direction: Direction, refinements: &AtomicU64| {
            let sums = self.families.encoded_sums(direction);
            Sent {
                tensors: sums.frames,
                raw_bytes: sums.raw_bytes,
                wire_bytes: sums.wire_bytes,
                refinements: refinements.load(Ordering::Relaxed),
            }
        };
        let (passed, passed_bytes) = {
            let by_reason = self.passed.lock().unwrap_or_else(|e| e.into_inner());
            (
                by_reason
                    .iter()
                    .map(|(reason, p)| (*reason, p.responses))
                    .collect(),
                by_reason
                    .iter()
                    .filter_map(|(reason, p)| Some((*reason, p.bytes?)))
                    .collect(),
            )
        };
        Totals {
            push: sent(Direction::Push, &self.push_refinements),
            pull: sent(Direction::Pull, &self.pull_refinements),
            restored: self.families.restored(),
            decode_failures: self.families.decode_failures(),
            fallbacks: self.fallbacks_fetched.load(Ordering::Relaxed),
            fallbacks_served: self.fallbacks_served.load(Ordering::Relaxed),
            fallbacks_released: self.fallbacks_released.load(Ordering::Relaxed),
            drift_resets: self.drift_resets.load(Ordering::Relaxed),
            settles: self.settles.load(Ordering::Relaxed),
            critical_pushes: self.critical_pushes.load(Ordering::Relaxed),
            forced_exact: self.forced_exact.load(Ordering::Relaxed),
            mirror_matches: self.mirror_checks[0].load(Ordering::Relaxed),
            mirror_mismatches: self.mirror_checks[1].load(Ordering::Relaxed),
            passed,
            passed_bytes,
            hop: self.hop.totals(),
            ids_again: tlc_wire::hop::Counted {
                messages: self.ids_again[0].load(Ordering::Relaxed),
                raw_bytes: self.ids_again[1].load(Ordering::Relaxed),
                wire_bytes: self.ids_again[2].load(Ordering::Relaxed),
            },
        }
    }

    /// One line with every total, for the log at shutdown.
    pub fn summary(&self) -> String {
        let totals = self.totals();
        let direction = |name: &str, sent: &Sent| {
            format!(
                "{name}: tensors={} raw_bytes={} wire_bytes={} ratio={:.1} refinements={}",
                sent.tensors,
                sent.raw_bytes,
                sent.wire_bytes,
                sent.ratio(),
                sent.refinements,
            )
        };
        format!(
            "{}; {}; restored={} decode_failures={} fallbacks={} fallbacks_served={} drift_resets={} \
             mirror_matches={} mirror_mismatches={} forced_exact={} hop_sent_raw={} hop_sent_wire={} hop_received_wire={} hop_received_raw={} hop_failures={} \
             hop_unshrunk={} passed_bytes={} passed={:?}",
            direction("push", &totals.push),
            direction("pull", &totals.pull),
            totals.restored,
            totals.decode_failures,
            totals.fallbacks,
            totals.fallbacks_served,
            totals.drift_resets,
            totals.mirror_matches,
            totals.mirror_mismatches,
            totals.forced_exact,
            totals.hop.compressed.raw_bytes,
            totals.hop.compressed.wire_bytes,
            totals.hop.restored.wire_bytes,
            totals.hop.restored.raw_bytes,
            totals.hop.failures,
            totals.hop.unshrunk_bytes,
            totals.passed_bytes.values().sum::<u64>(),
            totals.passed,
        )
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
        // The first of a reason is told apart: the daemon logs it.
        let small = PassReason::Policy(tlc_core::PassReason::Small);
        assert!(stats.passed(&small));
        assert!(!stats.passed_read(&small, 300));
        assert!(stats.passed(&PassReason::Policy(tlc_core::PassReason::Skipped)));
        stats.mirror_checked(true);
        assert_eq!(
            stats.summary(),
            "push: tensors=1 raw_bytes=4000 wire_bytes=100 ratio=40.0 refinements=0; \
             pull: tensors=1 raw_bytes=800 wire_bytes=200 ratio=4.0 refinements=3; \
             restored=1 decode_failures=1 fallbacks=1 fallbacks_served=2 drift_resets=0 \
             mirror_matches=1 mirror_mismatches=0 forced_exact=0 hop_sent_raw=0 hop_sent_wire=0 hop_received_wire=0 hop_received_raw=0 hop_failures=0 \
             hop_unshrunk=0 passed_bytes=300 passed={\"policy_skip\": 1, \"small\": 2}"
        );
    }

    #[test]
    fn totals_are_the_series_summed_over_every_label() {
        let stats = Stats::default();
        let ms = Duration::from_millis(1);
        // One direction, two codecs and two classes: one total.
        for (codec, class, raw, wire) in [
            (CodecId::ThreeLc, TensorClass::DenseGradient, 4000, 100),
            (CodecId::Int8, TensorClass::Sparse, 800, 200),
            (CodecId::ThreeLc, TensorClass::DenseGradient, 4000, 120),
        ] {
            stats.compressed(Direction::Push, codec, class, raw, wire, ms);
        }
        stats.decoded(Direction::Push, CodecId::ThreeLc, ms);
        stats.decoded(Direction::Pull, CodecId::None, ms);
        stats.decode_failed(Direction::Pull);
        let totals = stats.totals();
        assert_eq!(
            *totals.direction(Direction::Push),
            Sent {
                tensors: 3,
                raw_bytes: 8800,
                wire_bytes: 420,
                refinements: 0,
            }
        );
        assert_eq!(totals.pull, Sent::default());
        assert_eq!((totals.restored, totals.decode_failures), (2, 1));
        // Reading the totals made no series: no pull and no other codec
        // shows up in the exposition.
        let mut registry = prometheus_client::registry::Registry::with_prefix("tlc");
        stats.families().register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            !text.contains(r#"tlc_frames_total{direction="pull""#),
            "{text}"
        );
        assert!(!text.contains(r#"codec="fp16""#), "{text}");
    }
}
