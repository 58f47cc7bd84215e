//! Training progress as the step watch saw it ([`tlc_sidecar::training`]):
//! the global step, when it last advanced, and the times it went back.
//! Read when scraped.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use tlc_sidecar::sidecar::Sidecar;

use super::{counter_at, counters_by};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

/// Registers the training series of `sidecar`.
pub fn register(registry: &mut Registry, sidecar: &Sidecar) {
    let view = sidecar.training_view(Instant::now());
    let resets = counters_by([
        (ActionLabel { action: "failed" }, view.resets_failed),
        (ActionLabel { action: "warned" }, view.resets_warned),
    ]);
    registry.register(
        "training_resets",
        "Times the global step went back to the model's start mid-run (TensorFlow \
         re-initialised the variables): failed (the job was failed, recovery.on_model_reset = \
         \"fail\") or warned",
        resets,
    );
    registry.register(
        "training_rewinds",
        "Times the global step went back to a point after the start (a checkpoint restore)",
        counter_at(view.rewinds),
    );
    registry.register(
        "training_stuck_failures",
        "Times the calls in progress were failed because the global step did not advance for \
         recovery.stall_fail_seconds after TensorFlow rebuilt a session",
        counter_at(view.stalls_failed),
    );
    // No read yet: no series, rather than a step 0 that never was.
    if let Some(step) = view.global_step {
        let gauge = Gauge::<i64>::default();
        gauge.set(step);
        registry.register(
            "training_global_step",
            "The global step as last read through this sidecar (the highest since it last \
             went back)",
            gauge,
        );
    }
    if let Some(unix) = view.advanced_unix_time {
        let gauge = Gauge::<f64, AtomicU64>::default();
        gauge.set(unix);
        registry.register_with_unit(
            "training_global_step_advanced_timestamp",
            "When the global step last advanced, seconds since the epoch",
            Unit::Seconds,
            gauge,
        );
    }
}

#[cfg(test)]
mod tests {
    use tlc_sidecar::sidecar::Sidecar;
    use tlc_sidecar::training::{Moment, StepRead};

    #[test]
    fn series_after_a_reset() {
        let sidecar = Sidecar::default();
        let text = crate::metrics::render(&sidecar).unwrap();
        assert!(
            text.contains("tlc_training_resets_total{action=\"failed\"} 0"),
            "{text}"
        );
        assert!(text.contains("tlc_training_rewinds_total 0"), "{text}");
        assert!(!text.contains("tlc_training_global_step "), "{text}");
        let read = StepRead {
            holder: "/job:ps/replica:0/task:0",
            incarnation: 1,
            requester: "/job:worker/replica:0/task:0",
            node: "global_step/read",
        };
        for value in [5, 6, 7, 0] {
            sidecar.observe_step_read(read, value, Moment::now());
        }
        let text = crate::metrics::render(&sidecar).unwrap();
        for line in [
            "tlc_training_resets_total{action=\"failed\"} 1",
            "tlc_training_resets_total{action=\"warned\"} 0",
            "tlc_training_global_step 0",
            "# UNIT tlc_training_global_step_advanced_timestamp_seconds seconds",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
