//! The labelled series of one sidecar: where every tensor the data path
//! encodes or decodes, every keyframe, call and configuration reload is
//! counted, once. The sidecar's `Stats` is the only writer; its readers
//! are the metrics endpoint, which registers the series as they are
//! ([`Families::register`]), and the plain totals of the admin API and the
//! shutdown log, which are these series summed over their labels (by
//! `Stats::totals`).
//!
//! Every label value here is a `&'static str` chosen by tlcd (a direction,
//! a codec name, an outcome), never a string from a request, so each
//! family has a small, fixed set of series, and a sum over them is a walk
//! over the label values tlcd has (every codec, both directions). Updating
//! one is a read-locked map lookup and an atomic add (a short mutex for
//! histograms, as prometheus-client implements them); nothing is held
//! across an await. A sum looks series up without creating them, so
//! reading the totals never adds an empty series to the exposition.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tlc_codec::CodecId;

use tlc_core::{Direction, Outcome, Role, TensorClass};

/// Upper bounds of the codec-time buckets, in seconds: 10 µs (a small
/// tensor's int8 pass) to 1 s (hundreds of MB through 3LC on a slow core).
pub const CODEC_BUCKETS: [f64; 16] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0,
];

/// Upper bounds of the call-latency buckets, in seconds: 100 µs (a small
/// tensor on loopback) to 10 s (a large tensor across a slow network).
pub const CALL_BUCKETS: [f64; 16] = [
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `direction` and `codec` of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectionCodec {
    /// `push` or `pull`.
    pub direction: &'static str,
    /// The codec's short name (`3lc`, `int8`, ...).
    pub codec: &'static str,
}

/// `direction` and `class` of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectionClass {
    /// `push` or `pull`.
    pub direction: &'static str,
    /// `dense_read`, `dense_gradient`, `sparse` or `unknown`.
    pub class: &'static str,
}

/// `direction` of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectionLabel {
    /// `push` or `pull`.
    pub direction: &'static str,
}

/// `side` of a pull: the sidecar that encodes or the one that decodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SideLabel {
    /// `holder` or `requester`.
    pub side: &'static str,
}

/// `role` and `outcome` of a `RecvTensor` call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CallLabels {
    /// `inbound` or `outbound`.
    pub role: &'static str,
    /// See [`Outcome`].
    pub outcome: &'static str,
}

/// `result` of a configuration reload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `error`.
    pub result: &'static str,
}

type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

fn codec_histogram() -> Histogram {
    Histogram::new(CODEC_BUCKETS)
}

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// The labelled counters and histograms of one sidecar. Cloning shares
/// the series (prometheus-client keeps them behind `Arc`s), which is how a
/// scrape's registry gets them. Counted into by the sidecar's `Stats`
/// only (the recording methods are the crate's own); read by anyone.
#[derive(Debug, Clone)]
pub struct Families {
    raw_bytes: Family<DirectionCodec, Counter>,
    wire_bytes: Family<DirectionCodec, Counter>,
    frames: Family<DirectionCodec, Counter>,
    class_raw_bytes: Family<DirectionClass, Counter>,
    class_wire_bytes: Family<DirectionClass, Counter>,
    encode_seconds: Histograms<DirectionCodec>,
    decode_seconds: Histograms<DirectionCodec>,
    restored: Family<DirectionLabel, Counter>,
    decode_failures: Family<DirectionLabel, Counter>,
    keyframes: Family<SideLabel, Counter>,
    recv_tensor_seconds: Histograms<CallLabels>,
    config_reloads: Family<ResultLabel, Counter>,
}

impl Default for Families {
    fn default() -> Self {
        let families = Families {
            raw_bytes: Family::default(),
            wire_bytes: Family::default(),
            frames: Family::default(),
            class_raw_bytes: Family::default(),
            class_wire_bytes: Family::default(),
            encode_seconds: Family::new_with_constructor(codec_histogram),
            decode_seconds: Family::new_with_constructor(codec_histogram),
            restored: Family::default(),
            decode_failures: Family::default(),
            keyframes: Family::default(),
            recv_tensor_seconds: Family::new_with_constructor(call_histogram),
            config_reloads: Family::default(),
        };
        // Both results from the start: "no failed reload" then reads as 0
        // rather than as a missing series, which alerts cannot tell apart
        // from a scrape that lost the family. The same for decode failures:
        // a series born at 1 has no increase() for its first failure, so
        // the TlcDecodeFailures alert would miss it, and the dashboards
        // would show "No data" for a healthy sidecar.
        for result in ["ok", "error"] {
            drop(
                families
                    .config_reloads
                    .get_or_create(&ResultLabel { result }),
            );
        }
        for direction in [Direction::Push, Direction::Pull] {
            drop(families.decode_failures.get_or_create(&DirectionLabel {
                direction: direction.name(),
            }));
        }
        families
    }
}

/// The labels of a tensor travelling `direction` encoded with `codec`.
pub fn direction_codec(direction: Direction, codec: CodecId) -> DirectionCodec {
    DirectionCodec {
        direction: direction.name(),
        codec: codec.name(),
    }
}

/// Sums of the series of tensors sent compressed in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EncodedSums {
    /// Tensors (`tlc_frames_total`).
    pub(crate) frames: u64,
    /// Their size as f32 (`tlc_tensor_raw_bytes_total`).
    pub(crate) raw_bytes: u64,
    /// Their envelopes' size (`tlc_tensor_wire_bytes_total`).
    pub(crate) wire_bytes: u64,
}

/// The value of one series, 0 if it was never made (looked up, not made).
fn value<S: Clone + Eq + std::hash::Hash>(family: &Family<S, Counter>, labels: &S) -> u64 {
    family.get(labels).map_or(0, |counter| counter.get())
}

/// A family labelled by direction alone, summed.
fn sum_by_direction(family: &Family<DirectionLabel, Counter>) -> u64 {
    [Direction::Push, Direction::Pull]
        .into_iter()
        .map(|direction| {
            value(
                family,
                &DirectionLabel {
                    direction: direction.name(),
                },
            )
        })
        .fold(0, u64::saturating_add)
}

impl Families {
    /// One tensor of `class` encoded with `codec` (the codec the policy
    /// chose for it).
    pub(crate) fn encoded(
        &self,
        direction: Direction,
        codec: CodecId,
        class: TensorClass,
        raw: usize,
        wire: usize,
        took: Duration,
    ) {
        let labels = direction_codec(direction, codec);
        self.raw_bytes.get_or_create(&labels).inc_by(raw as u64);
        self.wire_bytes.get_or_create(&labels).inc_by(wire as u64);
        self.frames.get_or_create(&labels).inc();
        let by_class = DirectionClass {
            direction: direction.name(),
            class: class.name(),
        };
        self.class_raw_bytes
            .get_or_create(&by_class)
            .inc_by(raw as u64);
        self.class_wire_bytes
            .get_or_create(&by_class)
            .inc_by(wire as u64);
        self.encode_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// One envelope decoded; `codec` is its first frame's (`none` for
    /// keyframes and empty chains).
    pub(crate) fn decoded(&self, direction: Direction, codec: CodecId, took: Duration) {
        let label = DirectionLabel {
            direction: direction.name(),
        };
        self.restored.get_or_create(&label).inc();
        self.decode_seconds
            .get_or_create(&direction_codec(direction, codec))
            .observe(took.as_secs_f64());
    }

    /// One envelope that could not be used.
    pub(crate) fn decode_failed(&self, direction: Direction) {
        let label = DirectionLabel {
            direction: direction.name(),
        };
        self.decode_failures.get_or_create(&label).inc();
    }

    /// One keyframe served (holder) or applied (requester).
    pub(crate) fn keyframe(&self, side: Role) {
        let label = SideLabel {
            side: side.side_name(),
        };
        self.keyframes.get_or_create(&label).inc();
    }

    /// One `RecvTensor` call through a listener of `role`.
    pub(crate) fn recv_tensor(&self, role: Role, outcome: Outcome, took: Duration) {
        let labels = CallLabels {
            role: role.name(),
            outcome: outcome.name(),
        };
        self.recv_tensor_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// One configuration reload, successful or refused.
    pub(crate) fn config_reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// What tensors sent compressed in `direction` added up to: the
    /// series of every codec summed.
    pub(crate) fn encoded_sums(&self, direction: Direction) -> EncodedSums {
        let mut sums = EncodedSums::default();
        for codec in CodecId::ALL {
            let labels = direction_codec(direction, codec);
            sums.frames = sums.frames.saturating_add(value(&self.frames, &labels));
            sums.raw_bytes = sums
                .raw_bytes
                .saturating_add(value(&self.raw_bytes, &labels));
            sums.wire_bytes = sums
                .wire_bytes
                .saturating_add(value(&self.wire_bytes, &labels));
        }
        sums
    }

    /// Envelopes restored, both directions.
    pub(crate) fn restored(&self) -> u64 {
        sum_by_direction(&self.restored)
    }

    /// Envelopes that could not be used, both directions.
    pub(crate) fn decode_failures(&self) -> u64 {
        sum_by_direction(&self.decode_failures)
    }

    /// Adds every family to `registry` (which should have the `tlc` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "tensor_raw",
            "Size as f32 of the tensors this sidecar sent compressed (encoding side)",
            Unit::Bytes,
            self.raw_bytes.clone(),
        );
        registry.register_with_unit(
            "tensor_wire",
            "Size of the envelopes sent in their place (encoding side)",
            Unit::Bytes,
            self.wire_bytes.clone(),
        );
        registry.register(
            "frames",
            "Tensors sent compressed, one envelope each (encoding side)",
            self.frames.clone(),
        );
        registry.register_with_unit(
            "class_raw",
            "Size as f32 of the tensors sent compressed, by the class the graph gave them \
             (encoding side)",
            Unit::Bytes,
            self.class_raw_bytes.clone(),
        );
        registry.register_with_unit(
            "class_wire",
            "Size of their envelopes, by class (encoding side)",
            Unit::Bytes,
            self.class_wire_bytes.clone(),
        );
        registry.register_with_unit(
            "encode",
            "Time to encode one tensor through its context (error feedback or replica delta, \
             codec, envelope)",
            Unit::Seconds,
            self.encode_seconds.clone(),
        );
        registry.register_with_unit(
            "decode",
            "Time to decode one envelope into the tensor handed to TensorFlow",
            Unit::Seconds,
            self.decode_seconds.clone(),
        );
        registry.register(
            "restored",
            "Compressed responses restored for TensorFlow (decoding side)",
            self.restored.clone(),
        );
        registry.register(
            "decode_failures",
            "Compressed responses that could not be restored (decoding side)",
            self.decode_failures.clone(),
        );
        registry.register(
            "keyframes",
            "Pull keyframes (whole replicas) served by the holder or applied by the requester",
            self.keyframes.clone(),
        );
        registry.register_with_unit(
            "recv_tensor",
            "Latency of a RecvTensor call through the sidecar, from the request reaching the \
             sidecar to the response head being ready",
            Unit::Seconds,
            self.recv_tensor_seconds.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads, applied (ok) or refused (error)",
            self.config_reloads.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn render(families: &Families) -> String {
        let mut registry = Registry::with_prefix("tlc");
        families.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn buckets_ascend() {
        for buckets in [CODEC_BUCKETS, CALL_BUCKETS] {
            assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
        }
        assert_eq!(CODEC_BUCKETS[0], 1e-5);
        assert_eq!(CODEC_BUCKETS[15], 1.0);
    }

    #[test]
    fn encoded_counts_bytes_frames_and_time_per_codec() {
        let families = Families::default();
        let ms = Duration::from_millis(3);
        families.encoded(
            Direction::Push,
            CodecId::ThreeLc,
            TensorClass::DenseGradient,
            4000,
            100,
            ms,
        );
        families.encoded(
            Direction::Push,
            CodecId::ThreeLc,
            TensorClass::DenseGradient,
            4000,
            120,
            ms,
        );
        families.encoded(
            Direction::Pull,
            CodecId::Int8,
            TensorClass::DenseRead,
            800,
            200,
            ms,
        );
        let text = render(&families);
        for line in [
            r#"tlc_tensor_raw_bytes_total{direction="push",codec="3lc"} 8000"#,
            r#"tlc_tensor_wire_bytes_total{direction="push",codec="3lc"} 220"#,
            r#"tlc_frames_total{direction="pull",codec="int8"} 1"#,
            r#"tlc_encode_seconds_count{direction="push",codec="3lc"} 2"#,
            r#"tlc_encode_seconds_bucket{le="0.005",direction="push",codec="3lc"} 2"#,
            r#"tlc_encode_seconds_bucket{le="0.0025",direction="push",codec="3lc"} 0"#,
            r#"tlc_config_reloads_total{result="error"} 0"#,
            r#"tlc_decode_failures_total{direction="push"} 0"#,
            r#"tlc_decode_failures_total{direction="pull"} 0"#,
            "# UNIT tlc_tensor_raw_bytes bytes",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // Nothing decoded yet: the family is left out, not shown empty.
        assert!(!text.contains("tlc_restored"), "{text}");
    }

    #[test]
    fn outcomes_and_reloads() {
        let families = Families::default();
        let us = Duration::from_micros(300);
        families.recv_tensor(Role::Inbound, Outcome::Compressed, us);
        families.recv_tensor(Role::Outbound, Outcome::Fallback, us);
        families.config_reloaded(true);
        families.config_reloaded(false);
        families.config_reloaded(true);
        families.decode_failed(Direction::Pull);
        families.keyframe(Role::Outbound);
        let text = render(&families);
        for line in [
            r#"tlc_recv_tensor_seconds_count{role="inbound",outcome="compressed"} 1"#,
            r#"tlc_recv_tensor_seconds_bucket{le="0.0005",role="outbound",outcome="fallback"} 1"#,
            r#"tlc_config_reloads_total{result="ok"} 2"#,
            r#"tlc_config_reloads_total{result="error"} 1"#,
            r#"tlc_decode_failures_total{direction="pull"} 1"#,
            r#"tlc_keyframes_total{side="requester"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
