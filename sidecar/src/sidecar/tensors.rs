//! The per-tensor view of a sidecar's contexts: every context as a row for
//! the admin API (`/v1/tensors`) and `tlcctl tensors`, the bytes each one
//! encoded and the replicas' versions for the metrics, and one context or
//! replica looked at on its own (for the demo's and tests' checks).

use std::collections::HashMap;
use std::time::Instant;

use super::classes::ClassRecord;
use super::stats::ratio;
use super::Sidecar;
use tlc_codec::{Codec, Params};

use crate::policy::{codec_view, Treatment};
use tlc_admin_api::{CodecView, TensorRow};
use tlc_context::push::{l2, scale_of};
use tlc_context::{PullSource, PushContext};
use tlc_core::Direction;
use tlc_core::TensorKey;

/// What one holder-side context encoded so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextBytes {
    /// Push contexts (error feedback) or pull sources (replicas).
    pub direction: Direction,
    /// The tensor's context name.
    pub tensor: String,
    /// Size as f32 of the tensors it sent compressed.
    pub raw_bytes: u64,
    /// Size of their envelopes.
    pub wire_bytes: u64,
    /// Push contexts under the fidelity controller: whether the stream is
    /// in a critical regime now.
    pub critical: Option<bool>,
    /// Push contexts whose controller asks for it: what the requester last
    /// said of the workers' agreement on this tensor, -1 to 1.
    pub agreement: Option<f64>,
}

/// The highest version among the pull replicas of each side; `None` while
/// a side has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaVersions {
    /// The holder's pull sources.
    pub holder: Option<u64>,
    /// The requester's replicas.
    pub requester: Option<u64>,
}

/// One tensor's link decisions over its requesters.
#[derive(Debug, Default)]
struct LinkSummary {
    requesters: u32,
    passing: u32,
    rate: Option<f64>,
    break_even: Option<f64>,
}

/// The codec a requester saw in a frame (it has no codec settings of its own).
fn view_of_params(params: Params) -> CodecView {
    let (sparsity, k) = match params {
        Params::ThreeLc { sparsity, .. } => (Some(sparsity), None),
        Params::TopK { percent, .. } => (None, Some(percent)),
        _ => (None, None),
    };
    CodecView {
        codec: params.codec().name().to_string(),
        sparsity: sparsity.map(f64::from),
        k: k.map(f64::from),
    }
}

/// `calm` or `critical`, as the admin API says a push stream's regime.
fn regime_name(critical: bool) -> String {
    if critical { "critical" } else { "calm" }.to_string()
}

impl Sidecar {
    /// Every tensor context of this sidecar, in no particular order. Each
    /// context is locked briefly in turn; the error-buffer norm is one pass
    /// over the buffer, so this is for operators, not for the data path.
    pub fn tensors(&self) -> Vec<TensorRow> {
        let now = Instant::now();
        let mut rows = Vec::new();
        self.add_push_contexts(now, &mut rows);
        self.add_pull_sources(now, &mut rows);
        self.add_replicas(now, &mut rows);
        self.add_classes(now, &mut rows);
        self.add_links(&mut rows);
        rows
    }

    /// A row for each of the holder's error buffers.
    fn add_push_contexts(&self, now: Instant, rows: &mut Vec<TensorRow>) {
        for listing in self.contexts.push().snapshot(now, |context| {
            (
                context.codec(),
                context.counters(),
                l2(context.residual()),
                context.residual().len(),
            )
        }) {
            let (codec, counters, norm, elements) = listing.summary;
            let base = TensorRow::new("push", "holder", listing.key.tensor, codec_view(codec));
            rows.push(TensorRow {
                treatment: Some("error_feedback".into()),
                peer: Some(listing.key.requester),
                elements: elements as u64,
                frames: counters.frames,
                raw_bytes: counters.raw_bytes,
                wire_bytes: counters.wire_bytes,
                ratio: ratio(counters.raw_bytes, counters.wire_bytes),
                last_scale: counters.last_scale.map(f64::from),
                error_norm: Some(norm),
                peak_norm: (counters.peak_l2 > 0.0).then_some(counters.peak_l2),
                regime: counters.critical.map(regime_name),
                critical_pushes: counters.critical.map(|_| counters.critical_pushes),
                agreement: counters.agreement,
                idle_seconds: listing.idle.as_secs_f64(),
                memory_bytes: listing.memory_bytes as u64,
                ..base
            });
        }
    }

    /// A row for each of the holder's pull sources.
    fn add_pull_sources(&self, now: Instant, rows: &mut Vec<TensorRow>) {
        for listing in self.contexts.pull().snapshot(now, |source| {
            (
                source.codec(),
                source.counters(),
                source.last_scale(),
                source.replica().len(),
                source.state(),
            )
        }) {
            let (codec, counters, last_scale, elements, state) = listing.summary;
            let base = TensorRow::new("pull", "holder", listing.key.tensor, codec_view(codec));
            rows.push(TensorRow {
                treatment: Some("replica".into()),
                elements: elements as u64,
                frames: counters.keyframes + counters.chains + counters.up_to_date,
                raw_bytes: counters.raw_bytes,
                wire_bytes: counters.wire_bytes,
                ratio: ratio(counters.raw_bytes, counters.wire_bytes),
                last_scale: last_scale.map(f64::from),
                replica_version: state.map(|s| s.version),
                idle_seconds: listing.idle.as_secs_f64(),
                memory_bytes: listing.memory_bytes as u64,
                ..base
            });
        }
    }

    /// A row for each of the requester's replicas.
    fn add_replicas(&self, now: Instant, rows: &mut Vec<TensorRow>) {
        for listing in self.contexts.replicas().table().snapshot(now, |replica| {
            (
                replica.counters(),
                replica.values().map_or(0, <[f32]>::len),
                replica.state(),
                replica.last_params(),
            )
        }) {
            let (counters, elements, state, params) = listing.summary;
            let codec = params.map_or(codec_view(Codec::None), view_of_params);
            let base = TensorRow::new("pull", "requester", listing.key.tensor, codec);
            rows.push(TensorRow {
                treatment: Some("replica".into()),
                peer: Some(listing.key.holder),
                elements: elements as u64,
                frames: counters.keyframes + counters.chains + counters.up_to_date,
                raw_bytes: counters.raw_bytes,
                wire_bytes: counters.wire_bytes,
                ratio: ratio(counters.raw_bytes, counters.wire_bytes),
                last_scale: params.as_ref().and_then(scale_of).map(f64::from),
                replica_version: state.map(|s| s.version),
                idle_seconds: listing.idle.as_secs_f64(),
                memory_bytes: listing.memory_bytes as u64,
                ..base
            });
        }
    }

    /// Puts each holder row's link decision on it, over its requesters.
    fn add_links(&self, rows: &mut [TensorRow]) {
        let mut by_tensor: HashMap<(&str, String), LinkSummary> = HashMap::new();
        for (key, view) in self.holder.payoffs.views() {
            let summary = by_tensor
                .entry((key.direction.name(), key.tensor.tensor))
                .or_default();
            summary.requesters += 1;
            summary.passing += u32::from(view.passing);
            if let Some(rate) = view.rate {
                summary.rate = Some(summary.rate.map_or(rate, |r: f64| r.min(rate)));
                summary.break_even = Some(view.break_even);
            }
        }
        for row in rows.iter_mut().filter(|r| r.side == "holder") {
            let Some(summary) = by_tensor.get(&(row.direction.as_str(), row.tensor.clone())) else {
                continue;
            };
            row.link = Some(match (summary.passing, summary.requesters) {
                (0, _) => "compress".to_string(),
                (passing, all) if passing == all => "pass".to_string(),
                (passing, all) => format!("pass:{passing}/{all}"),
            });
            row.link_rate = summary.rate;
            row.break_even_rate = summary.break_even;
        }
    }

    /// Puts the holder side's class and reason on its context rows, and
    /// adds a row for every tensor without a context (encoded without
    /// memory, or passed as it is).
    fn add_classes(&self, now: Instant, rows: &mut Vec<TensorRow>) {
        let records = self.holder.classes.snapshot(now, ClassRecord::clone);
        let mut by_tensor: HashMap<(&str, String), (&str, String)> = HashMap::new();
        for listing in &records {
            let record = &listing.summary;
            by_tensor.insert(
                (record.direction.name(), listing.key.tensor.clone()),
                (
                    record.classified.class.name(),
                    record.classified.reason.clone(),
                ),
            );
        }
        for row in rows.iter_mut().filter(|r| r.side == "holder") {
            if let Some((class, reason)) =
                by_tensor.get(&(row.direction.as_str(), row.tensor.clone()))
            {
                row.class = Some(class.to_string());
                row.reason = Some(reason.clone());
            }
        }
        for listing in records {
            let record = listing.summary;
            let treatment = match record.treatment {
                Some(Treatment::Stateless) => "stateless",
                Some(Treatment::RowMemory) => "row_memory",
                None => "passed",
                // Listed with their context above.
                Some(Treatment::ErrorFeedback | Treatment::Replica) => continue,
            };
            let base = TensorRow::new(
                record.direction.name(),
                "holder",
                listing.key.tensor,
                codec_view(record.codec),
            );
            rows.push(TensorRow {
                class: Some(record.classified.class.name().into()),
                reason: Some(record.classified.reason),
                treatment: Some(treatment.into()),
                peer: Some(listing.key.requester),
                elements: record.elements,
                frames: record.frames,
                raw_bytes: record.raw_bytes,
                wire_bytes: record.wire_bytes,
                ratio: ratio(record.raw_bytes, record.wire_bytes),
                idle_seconds: listing.idle.as_secs_f64(),
                memory_bytes: listing.memory_bytes as u64,
                ..base
            });
        }
    }

    /// The bytes each holder-side context (push contexts, pull sources)
    /// encoded, one entry per context. Each is locked briefly in turn.
    pub fn encoded_by_context(&self) -> Vec<ContextBytes> {
        let now = Instant::now();
        let mut rows = Vec::new();
        for listing in self
            .contexts
            .push()
            .snapshot(now, |context| context.counters())
        {
            rows.push(ContextBytes {
                direction: Direction::Push,
                tensor: listing.key.tensor,
                raw_bytes: listing.summary.raw_bytes,
                wire_bytes: listing.summary.wire_bytes,
                critical: listing.summary.critical,
                agreement: listing.summary.agreement,
            });
        }
        for listing in self
            .contexts
            .pull()
            .snapshot(now, |source| source.counters())
        {
            rows.push(ContextBytes {
                direction: Direction::Pull,
                tensor: listing.key.tensor,
                raw_bytes: listing.summary.raw_bytes,
                wire_bytes: listing.summary.wire_bytes,
                critical: None,
                agreement: None,
            });
        }
        rows
    }

    /// How far the pull replicas got, on each side.
    pub fn replica_versions(&self) -> ReplicaVersions {
        let now = Instant::now();
        let holder = self
            .contexts
            .pull()
            .snapshot(now, |source| source.state().map(|s| s.version))
            .into_iter()
            .filter_map(|l| l.summary)
            .max();
        let requester = self
            .contexts
            .replicas()
            .table()
            .snapshot(now, |replica| replica.state().map(|s| s.version))
            .into_iter()
            .filter_map(|l| l.summary)
            .max();
        ReplicaVersions { holder, requester }
    }

    /// What `look` reads of the push context of `key`, under its lock;
    /// `None` if there is none.
    pub fn inspect_push_context<R>(
        &self,
        key: &TensorKey,
        look: impl FnOnce(&PushContext) -> R,
    ) -> Option<R> {
        let context = self.contexts.push().get(key, Instant::now())?;
        let context = tlc_context::table::lock(&context);
        Some(look(&context))
    }

    /// What `look` reads of the pull source of `key` (the holder's
    /// replica), under its lock; `None` if there is none.
    pub fn inspect_pull_source<R>(
        &self,
        key: &TensorKey,
        look: impl FnOnce(&PullSource) -> R,
    ) -> Option<R> {
        let source = self.contexts.pull().get(key, Instant::now())?;
        let source = tlc_context::table::lock(&source);
        Some(look(&source))
    }

    /// The hash of the requester's replica of `key`, to compare with the
    /// holder's; `None` without one.
    pub fn replica_hash(&self, key: &TensorKey) -> Option<u64> {
        self.contexts.replicas().replica_hash(key, Instant::now())
    }
}
