//! What a scrape reads from the sidecar's state: the labelled series the
//! data path counts into, as they are; the totals that have none, turned
//! into series; the policy in force, the context tables, and the tensors
//! that moved the most bytes.
//!
//! Everything here is built fresh per scrape (a scrape is rare next to
//! tensors) and owned by the scrape's registry, so the registry never
//! borrows the sidecar.

use std::collections::{BTreeMap, HashMap};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use tlc_codec::Codec;

use tlc_core::Direction;
use tlc_sidecar::counters::{direction_codec, DirectionCodec, DirectionLabel, SideLabel};
use tlc_sidecar::sidecar::stats::Totals;
use tlc_sidecar::sidecar::Sidecar;

use super::{counter_at, counters_by};

/// Per-tensor series kept: the tensors with the most raw bytes. Bounds
/// the label set however many tensors a model has.
pub const TOP_TENSORS: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FallbackSide {
    side: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HopLabels {
    way: &'static str,
    stage: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabel {
    stage: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RowKind {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TableLabel {
    table: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TensorLabels {
    direction: &'static str,
    tensor: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The registry of one scrape of `sidecar`, every name prefixed `tlc_`.
pub fn registry(sidecar: &Sidecar) -> Registry {
    let mut registry = Registry::with_prefix("tlc");
    registry.register(
        "build",
        "The tlcd build: its version",
        Info::new([("version", env!("CARGO_PKG_VERSION"))]),
    );
    sidecar.stats().families().register(&mut registry);
    register_totals(&mut registry, &sidecar.stats().totals());
    register_policy(&mut registry, sidecar);
    register_tables(&mut registry, sidecar);
    register_rows(&mut registry, sidecar);
    register_tensors(&mut registry, sidecar);
    super::held::register(&mut registry, sidecar);
    super::training::register(&mut registry, sidecar);
    super::links::register(&mut registry, sidecar);
    registry
}

/// The totals the data path counts without labels of their own (the
/// sidecar's families hold the rest), as series.
fn register_totals(registry: &mut Registry, totals: &Totals) {
    let by_reason = |counts: &BTreeMap<&'static str, u64>| {
        counters_by(
            counts
                .iter()
                .map(|(&reason, &n)| (ReasonLabel { reason }, n)),
        )
    };
    registry.register(
        "passthrough",
        "RecvTensor responses left uncompressed, by reason",
        by_reason(&totals.passed),
    );
    registry.register_with_unit(
        "passthrough",
        "Body bytes of RecvTensor responses left uncompressed after the sidecar read them, \
         by reason (encoding side)",
        Unit::Bytes,
        by_reason(&totals.passed_bytes),
    );
    let fallbacks = counters_by([
        (FallbackSide { side: "fetched" }, totals.fallbacks),
        (FallbackSide { side: "served" }, totals.fallbacks_served),
        (FallbackSide { side: "released" }, totals.fallbacks_released),
    ]);
    registry.register(
        "fallbacks",
        "Original responses fetched after a decode failure (fetched), sent to a peer (served), \
         or dropped once the peer acknowledged their envelope (released)",
        fallbacks,
    );
    let ids_again = counters_by([
        (StageLabel { stage: "raw" }, totals.ids_again.raw_bytes),
        (StageLabel { stage: "wire" }, totals.ids_again.wire_bytes),
    ]);
    registry.register_with_unit(
        "ids_again",
        "Encoding side: body bytes of id tensors equal to ids of the same step the requester \
         holds, sent as a reference to them (raw: the responses, wire: what went instead)",
        Unit::Bytes,
        ids_again,
    );
    let hop = Family::<HopLabels, Counter>::default();
    for (way, counted) in [
        ("sent", totals.hop.compressed),
        ("received", totals.hop.restored),
    ] {
        for (stage, n) in [("raw", counted.raw_bytes), ("wire", counted.wire_bytes)] {
            hop.get_or_create(&HopLabels { way, stage }).inc_by(n);
        }
    }
    hop.get_or_create(&HopLabels {
        way: "sent",
        stage: "unshrunk",
    })
    .inc_by(totals.hop.unshrunk_bytes);
    registry.register_with_unit(
        "hop_compressed",
        "Messages between sidecars that are not envelopes (control calls, integer and small \
         tensors), compressed losslessly: bytes before (raw) and after (wire), as this sidecar \
         sent or received them; sent unshrunk: messages sent as they came because compressing \
         did not make them smaller (float values of small tensors, mostly)",
        Unit::Bytes,
        hop,
    );
    registry.register(
        "hop_restore_failures",
        "Compressed messages from a peer's sidecar that could not be restored (the call failed)",
        counter_at(totals.hop.failures),
    );
    let hop_refused = counters_by(tlc_sidecar::hop::Refusal::ALL.into_iter().map(|refusal| {
        let labels = ReasonLabel {
            reason: refusal.name(),
        };
        (labels, totals.hop.refused.of(refusal))
    }));
    registry.register(
        "hop_refused",
        "Calls hop compression would not hold: a peer's compressed request the in-flight budget \
         could not hold (gather_memory_budget) or that did not arrive within \
         limits.gather_seconds (gather_time), sent again uncompressed; an answer restoring to \
         more than limits.max_tensor_mib (answer_too_large), failed",
        hop_refused,
    );
    registry.register(
        "replica_drift_resets",
        "Pull replicas reset (lossless keyframe) because lossy deltas let them drift too far \
         from the model (encoding side)",
        counter_at(totals.drift_resets),
    );
    registry.register(
        "replica_settles",
        "Pull replicas brought to the model bit for bit by a lossless delta: a read that needs the \
         model (an evaluation, a checkpoint) or a read again of a value that stopped changing \
         (encoding side)",
        counter_at(totals.settles),
    );
    registry.register(
        "critical_pushes",
        "Gradients encoded while their stream was in a critical regime, held to the fidelity \
         controller's tighter lag bound (policy.refine.critical; encoding side)",
        counter_at(totals.critical_pushes),
    );
    super::checks::register(registry, totals);
    let refinements = counters_by([Direction::Push, Direction::Pull].map(|direction| {
        let labels = DirectionLabel {
            direction: direction.name(),
        };
        (labels, totals.direction(direction).refinements)
    }));
    registry.register(
        "refinement_passes",
        "Further 3LC passes sent because the first left too much error behind (policy.refine): \
         frames of pushes, versions of pulls (encoding side)",
        refinements,
    );
}

/// The codec of each direction before overrides, and 3LC's sparsity.
fn register_policy(registry: &mut Registry, sidecar: &Sidecar) {
    let policy = sidecar.policy();
    let sparsity = Family::<DirectionLabel, FloatGauge>::default();
    let mut codecs = Vec::new();
    for direction in [Direction::Push, Direction::Pull] {
        let codec = policy.codec_for(direction).codec;
        codecs.push(direction_codec(direction, codec.id()));
        // Only 3LC has an s: other codecs leave the series out rather
        // than show a made-up value.
        if let Codec::ThreeLc { sparsity: s } = codec {
            sparsity
                .get_or_create(&DirectionLabel {
                    direction: direction.name(),
                })
                .set(f64::from(s.get()));
        }
    }
    registry.register(
        "sparsity",
        "3LC sparsity multiplier s of the direction's codec (absent if that codec is not 3lc)",
        sparsity,
    );
    registry.register_collector(Box::new(PolicyCodecs(codecs)));
}

/// `tlc_policy_codec_info{direction, codec} 1`: an info family with one
/// series per direction, which prometheus-client's `Info` (one label set
/// per family) cannot express.
#[derive(Debug)]
struct PolicyCodecs(Vec<DirectionCodec>);

impl Collector for PolicyCodecs {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "policy_codec",
            "The codec each direction uses unless an override says otherwise.",
            None,
            MetricType::Info,
        )?;
        for labels in &self.0 {
            family.encode_info(labels)?;
        }
        Ok(())
    }
}

/// What the row-keyed path did (encoding side).
fn register_rows(registry: &mut Registry, sidecar: &Sidecar) {
    let counters = &sidecar.row_contexts().counters;
    let read = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let rows = counters_by([
        (RowKind { kind: "delta" }, read(&counters.hits)),
        (RowKind { kind: "new" }, read(&counters.misses)),
    ]);
    registry.register(
        "rows",
        "Distinct embedding or gradient rows sent by row id: delta (the requester held the row) \
         or new (sent whole; every pushed row)",
        rows,
    );
    for (name, help, n) in [
        (
            "rows_evicted",
            "Rows dropped from row mirrors and row error buffers by their bound",
            read(&counters.evictions),
        ),
        (
            "rows_without_ids",
            "Row-keyed tensors sent without memory because their step's ids were not seen",
            read(&counters.no_ids),
        ),
    ] {
        registry.register(name, help, counter_at(n));
    }
}

/// Sizes of the context tables, and how far replicas got.
fn register_tables(registry: &mut Registry, sidecar: &Sidecar) {
    let contexts = Family::<TableLabel, Gauge>::default();
    let memory = Family::<TableLabel, Gauge>::default();
    let sizes = sidecar.table_sizes();
    let [row_sources, row_mirrors, row_errors] = sidecar.row_contexts().sizes();
    for (table, stats) in [
        ("push", sizes.push),
        ("pull", sizes.pull),
        ("replica", sizes.replicas),
        ("row_source", row_sources),
        ("row_mirror", row_mirrors),
        ("row_error", row_errors),
    ] {
        let label = TableLabel { table };
        contexts
            .get_or_create(&label)
            .set(saturating_i64(stats.contexts as u64));
        memory
            .get_or_create(&label)
            .set(saturating_i64(stats.memory_bytes as u64));
    }
    registry.register(
        "contexts",
        "Tensor contexts held: push (error buffers), pull (sources), replica (requester replicas), \
         row_source / row_mirror / row_error (rows by row id: the holder's mirror of a requester's \
         rows, the requester's own, gradient rows' error buffers)",
        contexts,
    );
    registry.register_with_unit(
        "context_memory",
        "Memory held by each context table, as last measured",
        Unit::Bytes,
        memory,
    );
    let max = sidecar.replica_versions();
    let versions = Family::<SideLabel, Gauge>::default();
    for (side, max) in [("holder", max.holder), ("requester", max.requester)] {
        // No replica yet: no series, rather than a version 0 that never was.
        if let Some(max) = max {
            versions
                .get_or_create(&SideLabel { side })
                .set(saturating_i64(max));
        }
    }
    registry.register(
        "replica_version_max",
        "Highest version among pull replicas: the holder's sources or the requester's replicas",
        versions,
    );
}

/// Bytes per tensor on the encoding side, for the [`TOP_TENSORS`] largest.
fn register_tensors(registry: &mut Registry, sidecar: &Sidecar) {
    let rows = sidecar
        .encoded_by_context()
        .into_iter()
        .map(|context| TensorBytes {
            direction: context.direction.name(),
            tensor: context.tensor,
            raw: context.raw_bytes,
            wire: context.wire_bytes,
            critical: context.critical,
            agreement: context.agreement,
        })
        .collect();
    let raw = Family::<TensorLabels, Counter>::default();
    let wire = Family::<TensorLabels, Counter>::default();
    let critical = Family::<TensorLabels, Gauge>::default();
    let agreement = Family::<TensorLabels, FloatGauge>::default();
    for row in top_tensors(rows, TOP_TENSORS) {
        let labels = TensorLabels {
            direction: row.direction,
            tensor: row.tensor,
        };
        raw.get_or_create(&labels).inc_by(row.raw);
        wire.get_or_create(&labels).inc_by(row.wire);
        if let Some(now) = row.critical {
            critical.get_or_create(&labels).set(i64::from(now));
        }
        if let Some(said) = row.agreement {
            agreement.get_or_create(&labels).set(said);
        }
    }
    registry.register(
        "tensor_top_critical",
        "1 while one of the 20 largest tensors' gradient streams is in a critical regime (the \
         fidelity controller's tighter lag bound, policy.refine.critical), 0 while calm; push \
         contexts under the controller only",
        critical,
    );
    registry.register(
        "tensor_top_agreement",
        "How much the workers' decoded pushes agree over the whole gradient the parameter task \
         collects (-1 to 1, last window of steps), as its sidecar last said to the holder of one \
         of the 20 largest tensors; push contexts whose fidelity controller asks for it \
         (policy.refine.critical agreement) only",
        agreement,
    );
    registry.register_with_unit(
        "tensor_top_raw",
        "Size as f32 of what each of the 20 largest tensors sent compressed (encoding side)",
        Unit::Bytes,
        raw,
    );
    registry.register_with_unit(
        "tensor_top_wire",
        "Size of the envelopes each of the 20 largest tensors sent (encoding side)",
        Unit::Bytes,
        wire,
    );
}

/// One tensor's encoded bytes.
#[derive(Debug, Clone, PartialEq)]
struct TensorBytes {
    direction: &'static str,
    tensor: String,
    raw: u64,
    wire: u64,
    /// Push contexts under the fidelity controller: any of the tensor's
    /// streams critical.
    critical: Option<bool>,
    /// Push contexts whose controller asks for it: the workers' agreement
    /// the requester last said; the highest of the tensor's streams.
    agreement: Option<f64>,
}

/// The `n` tensors with the most raw bytes, after summing the contexts of
/// one tensor (a gradient sent to several tasks has one push context per
/// task). Ties go by name, so a scrape is deterministic.
fn top_tensors(rows: Vec<TensorBytes>, n: usize) -> Vec<TensorBytes> {
    type Sums = (u64, u64, Option<bool>, Option<f64>);
    let mut by_tensor: HashMap<(&'static str, String), Sums> = HashMap::new();
    for row in rows {
        let sums = by_tensor.entry((row.direction, row.tensor)).or_default();
        sums.0 = sums.0.saturating_add(row.raw);
        sums.1 = sums.1.saturating_add(row.wire);
        sums.2 = match (sums.2, row.critical) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        };
        // The highest: the stream the controller is likeliest to hold.
        sums.3 = match (sums.3, row.agreement) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    let mut merged: Vec<TensorBytes> = by_tensor
        .into_iter()
        .map(
            |((direction, tensor), (raw, wire, critical, agreement))| TensorBytes {
                direction,
                tensor,
                raw,
                wire,
                critical,
                agreement,
            },
        )
        .collect();
    merged.sort_by(|a, b| {
        b.raw
            .cmp(&a.raw)
            .then_with(|| a.tensor.cmp(&b.tensor))
            .then_with(|| a.direction.cmp(b.direction))
    });
    merged.truncate(n);
    merged
}

/// Gauges are `i64`; a count beyond that would be a bug, not a reason to wrap.
fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(direction: &'static str, tensor: &str, raw: u64) -> TensorBytes {
        TensorBytes {
            direction,
            tensor: tensor.into(),
            raw,
            wire: raw / 10,
            critical: None,
            agreement: None,
        }
    }

    /// Five push streams, two of tensor a, two of b, one of c, each given
    /// one of `values` by `with`, merged per tensor and sorted by name.
    fn merged_streams<T>(
        values: [T; 5],
        with: impl Fn(TensorBytes, T) -> TensorBytes,
    ) -> Vec<TensorBytes> {
        let rows = ["a", "a", "b", "b", "c"]
            .into_iter()
            .zip(values)
            .map(|(tensor, value)| with(row("push", tensor, 10), value))
            .collect();
        let mut top = top_tensors(rows, 3);
        top.sort_by(|x, y| x.tensor.cmp(&y.tensor));
        top
    }

    #[test]
    fn a_tensor_is_critical_while_any_of_its_streams_is() {
        let values = [Some(false), Some(true), Some(false), None, None];
        let top = merged_streams(values, |row, critical| TensorBytes { critical, ..row });
        let got: Vec<_> = top.iter().map(|r| r.critical).collect();
        assert_eq!(got, [Some(true), Some(false), None]);
    }

    #[test]
    fn a_tensors_agreement_is_the_highest_its_streams_heard() {
        let values = [Some(0.1), Some(0.3), Some(-0.2), None, None];
        let top = merged_streams(values, |row, agreement| TensorBytes { agreement, ..row });
        let got: Vec<_> = top.iter().map(|r| r.agreement).collect();
        assert_eq!(got, [Some(0.3), Some(-0.2), None]);
    }

    #[test]
    fn top_tensors_sums_contexts_and_keeps_the_largest() {
        let rows = vec![
            row("push", "a", 100),
            row("push", "b", 300),
            row("push", "a", 250), // a second task's context of "a"
            row("pull", "a", 50),
            row("pull", "c", 300),
        ];
        let top = top_tensors(rows, 3);
        let got: Vec<_> = top
            .iter()
            .map(|r| (r.direction, r.tensor.as_str(), r.raw, r.wire))
            .collect();
        assert_eq!(
            got,
            [
                ("push", "a", 350, 35),
                ("push", "b", 300, 30),
                ("pull", "c", 300, 30),
            ]
        );
    }

    #[test]
    fn top_tensors_bounds_the_series() {
        let rows = (0..100).map(|i| row("push", &format!("t{i}"), i)).collect();
        let top = top_tensors(rows, TOP_TENSORS);
        assert_eq!(top.len(), TOP_TENSORS);
        assert_eq!(top[0].tensor, "t99");
        assert_eq!(top[TOP_TENSORS - 1].tensor, "t80");
    }
}
