//! Row-keyed compression of embedding rows and gradient rows: the tensors
//! the graph pairs with the ids that cross beside them
//! ([`crate::graph::RowKeyed`]).
//!
//! - A pull of gathered rows goes through a mirror of the rows the
//!   requester holds, kept bit-identically by both sidecars
//!   ([`tlc_context::rows::RowMirror`]): a held row gets a delta with the
//!   pull codec, a new row a keyframe with `policy.row_keyframe_codec`
//!   (int8 with a step per row by default). The requester announces its
//!   mirror in `tlc-rows`; any disagreement starts a new one.
//! - A push of gradient rows goes through an error buffer per row id
//!   ([`tlc_context::rows::RowErrors`]), duplicate ids summed first, as
//!   the consuming op would.
//!
//! Both sides find the step's ids in [`super::row_ids`]. Whenever
//! anything is missing (no pairing, no ids, a requester that does not
//! speak rows, a shape that is not `[ids, ...]`), the tensor gets
//! `[policy.sparse]` without memory, as before; a requester that cannot
//! restore a row-keyed envelope fetches the original.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tlc_codec::{Codec, EntropyStage, Limits};
use tlc_context::rows::{restore_push, RowErrors, RowMirror, Uniques};
use tlc_context::{ContextMemory, ContextTable, TableLimits};
use tlc_core::TensorCall;
use tlc_wire::envelope::{Envelope, Kind};
use tlc_wire::peer::RowsHeader;

use super::row_ids::IdsKey;
use super::Sidecar;
use crate::graph::{Classified, RowRole, Training};

/// What one row costs beyond its values (hash map slot, bookkeeping): the
/// bound on rows is computed with it.
const ROW_OVERHEAD: usize = 48;

/// How long rows wait for ids still on their way; then the original is
/// fetched.
const IDS_PATIENCE: Duration = Duration::from_secs(2);

/// A share of a context table's memory one tensor's rows may take.
const SHARE_OF_TABLE: usize = 4;

/// Names the rows of one tensor between this sidecar and one peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowsKey {
    /// The other task: the requester (holder side) or the holder
    /// (requester side).
    pub peer: String,
    /// The tensor's context name.
    pub tensor: String,
}

struct Mirror(RowMirror);
struct Errors(RowErrors);

impl ContextMemory for Mirror {
    fn memory_bytes(&self) -> usize {
        self.0.bytes()
    }
}

impl ContextMemory for Errors {
    fn memory_bytes(&self) -> usize {
        self.0.bytes()
    }
}

/// Counters of the row-keyed path.
#[derive(Debug, Default)]
pub struct RowCounters {
    /// Unique rows sent as deltas (the requester held them).
    pub hits: AtomicU64,
    /// Unique rows sent whole (new to the requester) or as push rows.
    pub misses: AtomicU64,
    /// Rows dropped from mirrors and error buffers by their bound.
    pub evictions: AtomicU64,
    /// Row-keyed tensors that found no ids for their step.
    pub no_ids: AtomicU64,
}

/// Every row context of this sidecar.
pub struct RowContexts {
    /// Holder: the mirror of each requester's rows, per gathered tensor.
    sources: ContextTable<RowsKey, Mirror>,
    /// Requester: its own rows, per gathered tensor and holder.
    mirrors: ContextTable<RowsKey, Mirror>,
    /// Holder: error buffers of gradient rows, per requester and tensor.
    errors: ContextTable<RowsKey, Errors>,
    /// What happened.
    pub counters: RowCounters,
}

thread_local! {
    // Scratch for finding unique ids, reused by every call on this thread.
    static UNIQUES: RefCell<Uniques> = RefCell::new(Uniques::new());
}

/// What the requester's call said that the rows path needs.
#[derive(Debug, Clone, Copy)]
pub struct RowsAsked {
    /// Its rows of the tensor (`tlc-rows`); `None` if it does not speak rows.
    pub rows: Option<RowsHeader>,
    /// Whether frames may carry the entropy stage.
    pub entropy: EntropyStage,
    /// Whether the rows cross exactly (lossless deltas and keyframes), to
    /// settle what the link decision's raw calls left behind.
    pub exact: bool,
}

/// A row-keyed envelope made by the holder.
pub struct RowsEnvelope {
    /// The envelope bytes.
    pub bytes: Vec<u8>,
    /// The codec of the deltas or rows.
    pub codec: Codec,
    /// Refinement passes after the first.
    pub refinements: u32,
    /// Time spent encoding.
    pub took: Duration,
}

impl RowContexts {
    /// Empty tables with the bounds of the pull sources (`holder`) and
    /// the replicas (`requester`).
    pub fn new(holder: TableLimits, requester: TableLimits) -> RowContexts {
        RowContexts {
            sources: ContextTable::new(holder),
            mirrors: ContextTable::new(requester),
            errors: ContextTable::new(holder),
            counters: RowCounters::default(),
        }
    }

    /// The most bytes of rows this side keeps for one tensor.
    pub fn max_bytes(&self) -> u64 {
        (self.mirrors.limits().max_bytes / SHARE_OF_TABLE) as u64
    }

    /// Drops row contexts idle too long or beyond their tables' memory.
    pub fn evict(&self, now: Instant) {
        self.sources.evict(now);
        self.mirrors.evict(now);
        self.errors.evict(now);
    }

    /// Rows and bytes held: holder mirrors, requester mirrors, error buffers.
    pub fn sizes(&self) -> [tlc_context::table::TableStats; 3] {
        [
            self.sources.stats(),
            self.mirrors.stats(),
            self.errors.stats(),
        ]
    }

    /// The header a requester sends when asking for a row-keyed tensor of
    /// `role`: its mirror of gathered rows, or just that it speaks rows.
    pub fn announce(&self, holder: &str, tensor: &str, role: RowRole, now: Instant) -> RowsHeader {
        let mut header = RowsHeader {
            epoch: 0,
            version: 0,
            max_bytes: self.max_bytes(),
        };
        if role == RowRole::Gathered {
            let key = RowsKey {
                peer: holder.to_owned(),
                tensor: tensor.to_owned(),
            };
            if let Some(mirror) = self.mirrors.get(&key, now) {
                let mirror = tlc_context::table::lock(&mirror);
                header.epoch = mirror.0.epoch();
                header.version = mirror.0.version();
            }
        }
        header
    }
}

/// The ids the rows of `call` are keyed by: the worker sent them to the
/// parameter task in this step.
fn ids_key(call: &TensorCall, ids: &str, role: RowRole) -> IdsKey {
    let (worker, ps) = match role {
        // The rows go from the parameter task to the worker.
        RowRole::Gathered => (&call.requester_task, &call.holder_task),
        _ => (&call.holder_task, &call.requester_task),
    };
    IdsKey {
        src_task: worker.clone(),
        dst_task: ps.clone(),
        tensor_name: ids.to_owned(),
        step_id: call.step_id,
    }
}

/// Whether no id of `ids` repeats.
fn all_distinct(ids: &[i64]) -> bool {
    UNIQUES.with(|uniques| {
        let mut uniques = uniques.borrow_mut();
        uniques.compute(ids).0.len() == ids.len()
    })
}

/// Values per row, if `dims` is `[ids, ...]` with at least one value per row.
fn row_width(dims: &[u64], ids: usize, values: usize) -> Option<usize> {
    let (&rows, rest) = dims.split_first()?;
    let width = rest.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    let width = usize::try_from(width).ok()?;
    (rows == ids as u64 && ids > 0 && width > 0 && ids.checked_mul(width)? == values)
        .then_some(width)
}

/// The most rows `max_bytes` holds at `width` values per row.
fn rows_within(max_bytes: u64, width: usize) -> usize {
    let per_row = (width * 4 + ROW_OVERHEAD) as u64;
    usize::try_from(max_bytes / per_row).unwrap_or(usize::MAX)
}

impl Sidecar {
    /// Holder side: encodes `values` (shaped `dims`) by row id, if `call`
    /// is a row-keyed tensor whose requester announced `asked` and whose
    /// ids this side saw. `None`: not for rows, encode as before.
    pub(crate) fn encode_rows(
        &self,
        call: &TensorCall,
        classified: &Classified,
        asked: RowsAsked,
        dims: &[u64],
        values: &[f32],
        token: u64,
    ) -> Option<Result<RowsEnvelope, &'static str>> {
        let RowsAsked {
            rows: asked,
            entropy,
            exact,
        } = asked;
        let rows = classified.rows.as_ref()?;
        let asked = asked?;
        let policy = self.policy();
        if rows.role == RowRole::Ids || !policy.row_memory() {
            return None;
        }
        let Some(ids) = self.row_ids.get(&ids_key(call, &rows.ids, rows.role)) else {
            self.rows.counters.no_ids.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let width = row_width(dims, ids.len(), values.len())?;
        let (codec, keyframe) = if exact {
            (Codec::None, Codec::None)
        } else {
            (
                policy.row_codec(call.direction),
                policy.row_keyframe_codec(),
            )
        };
        let now = Instant::now();
        let key = RowsKey {
            peer: call.requester_task.clone(),
            tensor: call.tensor.clone(),
        };
        let max_bytes = asked.max_bytes.min(self.rows.max_bytes());
        let max_rows = rows_within(max_bytes, width);
        if rows.role == RowRole::SlicesApplied && !all_distinct(&ids) {
            // Applied row by row: a duplicate id would be applied twice,
            // once with its row and once with the zeros its later
            // positions decode to.
            return Some(Err("duplicate_ids_for_a_sparse_apply"));
        }
        let mut bytes = Vec::with_capacity(values.len() / 4 + 256);
        let result = UNIQUES.with(|uniques| {
            let mut uniques = uniques.borrow_mut();
            match rows.role {
                RowRole::Gathered => {
                    let mirror = self.rows.sources.get_or_insert_within(&key, now, 0, || {
                        Mirror(RowMirror::new(
                            self.contexts.next_epoch().get(),
                            width,
                            max_rows,
                        ))
                    })?;
                    let mut mirror = tlc_context::table::lock(&mirror);
                    let agreed = (mirror.0.epoch(), mirror.0.version())
                        == (asked.epoch, asked.version)
                        || (mirror.0.version() == 0 && asked.version == 0);
                    if !agreed || mirror.0.dim() != width {
                        // The requester holds other rows (or none): start over.
                        *mirror = Mirror(RowMirror::new(
                            self.contexts.next_epoch().get(),
                            width,
                            max_rows,
                        ));
                    }
                    mirror.0.set_entropy_stage(entropy);
                    // The bound a dense replica of this task's model keeps.
                    let synchronous =
                        self.graphs.training(&call.holder_task) == Training::Synchronous;
                    mirror
                        .0
                        .set_refinement(policy.refine().rows(policy.refine().pull(synchronous)));
                    Some(mirror.0.encode(
                        &ids,
                        values,
                        &keyframe,
                        &codec,
                        token,
                        &mut uniques,
                        &mut bytes,
                    ))
                }
                _ => {
                    let errors = self.rows.errors.get_or_insert_within(&key, now, 0, || {
                        Errors(RowErrors::new(width, max_rows))
                    })?;
                    let mut errors = tlc_context::table::lock(&errors);
                    if errors.0.rows() > 0 && errors.0.dim() != width {
                        *errors = Errors(RowErrors::new(width, max_rows));
                    }
                    errors.0.set_entropy_stage(entropy);
                    // A row's error waits for the row's next push, often
                    // many steps: bounded as a gradient applied on arrival.
                    errors
                        .0
                        .set_refinement(policy.refine().rows(policy.refine().push(false, false)));
                    Some(
                        errors
                            .0
                            .encode(&ids, values, &codec, token, &mut uniques, &mut bytes),
                    )
                }
            }
        });
        let encoded = match result {
            None => return Some(Err("row_table_full")),
            Some(Err(_)) => return Some(Err("rows_refused")),
            Some(Ok(encoded)) => encoded,
        };
        let counters = &self.rows.counters;
        counters
            .hits
            .fetch_add(encoded.hits as u64, Ordering::Relaxed);
        counters
            .misses
            .fetch_add((encoded.unique - encoded.hits) as u64, Ordering::Relaxed);
        counters
            .evictions
            .fetch_add(encoded.evicted as u64, Ordering::Relaxed);
        Some(Ok(RowsEnvelope {
            bytes,
            codec,
            refinements: encoded.refinements,
            took: encoded.took,
        }))
    }

    /// Requester side: restores a row-keyed envelope into the tensor's
    /// values, with the ids this side saw for the step. `known` is what
    /// this side's graphs say of the tensor.
    pub(crate) fn restore_rows(
        &self,
        call: &TensorCall,
        known: Option<&Classified>,
        envelope: &[u8],
        limits: &Limits,
    ) -> Result<(Vec<f32>, tlc_codec::CodecId), String> {
        let rows = known
            .and_then(|k| k.rows.as_ref())
            .ok_or("a row-keyed envelope for a tensor this side's graphs do not pair with ids")?;
        let ids = self
            .row_ids
            .get(&ids_key(call, &rows.ids, rows.role))
            .ok_or("a row-keyed envelope whose ids this side did not see")?;
        let parsed = Envelope::parse(envelope, limits).map_err(|e| e.to_string())?;
        let section = parsed.rows().ok_or("a row-keyed envelope without rows")?;
        let codec = parsed
            .frames()
            .last()
            .map_or(tlc_codec::CodecId::None, |f| f.header.codec());
        let mut values = Vec::new();
        UNIQUES.with(|uniques| {
            let mut uniques = uniques.borrow_mut();
            match parsed.header.kind {
                Kind::RowsPush => restore_push(&ids, &parsed, &mut uniques, &mut values)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Kind::RowsPull => {
                    let width = section.dim as usize;
                    let max_rows = section.max_rows as usize;
                    if rows_within(self.rows.max_bytes(), width) < max_rows {
                        return Err("the holder keeps more rows than this side may".to_owned());
                    }
                    let key = RowsKey {
                        peer: call.holder_task.clone(),
                        tensor: call.tensor.clone(),
                    };
                    let header = parsed.header;
                    let now = Instant::now();
                    let mirror = self
                        .rows
                        .mirrors
                        .get_or_insert_within(&key, now, 0, || {
                            Mirror(RowMirror::new(header.epoch, width, max_rows))
                        })
                        .ok_or("no room for the rows")?;
                    let mut mirror = tlc_context::table::lock(&mirror);
                    if header.base_version == 0 || mirror.0.epoch() != header.epoch {
                        *mirror = Mirror(RowMirror::new(header.epoch, width, max_rows));
                    }
                    let applied = mirror.0.apply(&ids, &parsed, &mut uniques, &mut values);
                    if applied.is_err() {
                        // Never keep rows that may differ from the holder's
                        // mirror: the next request starts over.
                        drop(mirror);
                        self.rows.mirrors.remove(&key);
                    }
                    applied.map(|_| ()).map_err(|e| e.to_string())
                }
                _ => Err("not a row-keyed envelope".to_owned()),
            }
        })?;
        Ok((values, codec))
    }

    /// Requester side, before restoring a row-keyed envelope: waits (a
    /// while at most) for the step's ids if they have not crossed yet.
    pub(crate) async fn await_row_ids(&self, call: &TensorCall, known: Option<&Classified>) {
        if let Some(rows) = known.and_then(|k| k.rows.as_ref()) {
            let key = ids_key(call, &rows.ids, rows.role);
            self.row_ids.wait_for(&key, IDS_PATIENCE).await;
        }
    }

    /// The row contexts, for counters and tables.
    pub fn row_contexts(&self) -> &RowContexts {
        &self.rows
    }
}

/// Whether an envelope (its header's kind byte) is row-keyed.
pub fn is_rows_envelope(envelope: &[u8]) -> bool {
    tlc_wire::envelope::EnvelopeHeader::parse(envelope)
        .is_ok_and(|h| matches!(h.kind, Kind::RowsPull | Kind::RowsPush))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_found_wherever_it_is() {
        assert!(all_distinct(&[]));
        assert!(all_distinct(&[3, 1, 2]));
        assert!(!all_distinct(&[3, 1, 3]));
        assert!(!all_distinct(&[7, 7]));
        // The scratch is reused: an earlier call leaves nothing behind.
        assert!(all_distinct(&[7]));
    }
}
