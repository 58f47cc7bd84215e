//! Rows behind the doors: the row contexts of [`Contexts`](super::Contexts)
//! and what [`Memory::Rows`](super::Memory::Rows) encodes through, and a
//! row-keyed envelope restores into.
//!
//! - A pull of gathered rows goes through a mirror of the rows the
//!   requester holds, kept bit-identically by both sidecars
//!   ([`RowMirror`]): a held row gets a delta with the call's codec, a new
//!   row a keyframe with [`RowMemory::keyframe`]. The requester announces
//!   its mirror ([`RowTables::announce`]); any disagreement starts a new
//!   one.
//! - A push of gradient rows goes through an error buffer per row id
//!   ([`RowErrors`]), duplicate ids summed first, as the consuming op
//!   would.
//!
//! Which tensors have rows, and the step's ids, are the caller's: it finds
//! them in its graphs and in the ids that crossed before the rows. Every
//! refusal here is a [`RowsRefused`], after which the caller encodes the
//! tensor without memory.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use thiserror::Error;
use tlc_codec::{Codec, CodecId, EntropyStage, Limits};
use tlc_core::TensorKey;
use tlc_wire::envelope::{Envelope, Kind};
use tlc_wire::peer::RowsHeader;

use super::Encoded;
use crate::pull::EpochGenerator;
use crate::refine::Refinement;
use crate::rows::{restore_push, RowErrors, RowMirror, Uniques};
use crate::table::{lock, ContextMemory, ContextTable, TableLimits, TableStats};

/// What one row costs beyond its values (hash map slot, bookkeeping): the
/// bound on rows is computed with it.
const ROW_OVERHEAD: usize = 48;

/// A share of a context table's memory one tensor's rows may take.
const SHARE_OF_TABLE: usize = 4;

thread_local! {
    // Scratch for finding unique ids, reused by every call on this thread
    // (buffers only: nothing in it outlives a call).
    static UNIQUES: RefCell<Uniques> = RefCell::new(Uniques::new());
}

/// Which rows a row-keyed tensor carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// Rows gathered from a table by the ids (a pull): through the mirror.
    Gathered,
    /// Gradient rows for the ids, whose consumer sums duplicates (a push).
    Pushed,
    /// Gradient rows applied row by row by a sparse apply: a duplicate id
    /// would be applied twice, so only calls whose ids are all distinct.
    PushedApplied,
}

/// The memory of a row-keyed tensor ([`Memory::Rows`](super::Memory::Rows)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowMemory<'a> {
    /// The step's lookup ids, one per row of the tensor.
    pub ids: &'a [i64],
    /// The tensor's shape: `[ids, ...]`.
    pub dims: &'a [u64],
    /// Which rows they are.
    pub kind: RowKind,
    /// What the requester said of its rows (`tlc-rows`).
    pub asked: RowsHeader,
    /// The codec of rows new to the requester (the call's codec is for
    /// deltas of held rows and for pushed rows).
    pub keyframe: Codec,
    /// How far the rows' memory may lag before further passes are sent.
    pub refine: Refinement,
}

/// Why a tensor's rows could not be kept; it is then encoded without
/// memory.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum RowsRefused {
    /// The shape is not `[ids, ...]` with at least one value per row.
    #[error("the shape does not match the ids")]
    Shape,
    /// A sparse apply's rows with a repeated id.
    #[error("duplicate ids for a sparse apply")]
    DuplicateIds,
    /// No room for the rows in the table's memory budget.
    #[error("row table full")]
    TableFull,
    /// The codec refused the rows.
    #[error("the codec refused the rows")]
    Codec,
}

impl RowsRefused {
    /// The reason as logs and metrics label it.
    pub fn label(self) -> &'static str {
        match self {
            RowsRefused::Shape => "rows_shape",
            RowsRefused::DuplicateIds => "duplicate_ids_for_a_sparse_apply",
            RowsRefused::TableFull => "row_table_full",
            RowsRefused::Codec => "rows_refused",
        }
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
    /// Row-keyed tensors that found no ids for their step (the caller
    /// counts them: it looks for the ids).
    pub no_ids: AtomicU64,
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

/// Every row context of one sidecar, keyed by [`TensorKey`] (the tensor
/// between its holder and its requester).
pub struct RowTables {
    /// Holder: the mirror of each requester's rows, per gathered tensor.
    sources: ContextTable<TensorKey, Mirror>,
    /// Requester: its own rows, per gathered tensor and holder.
    mirrors: ContextTable<TensorKey, Mirror>,
    /// Holder: error buffers of gradient rows, per requester and tensor.
    errors: ContextTable<TensorKey, Errors>,
    /// What happened.
    pub counters: RowCounters,
}

impl RowTables {
    /// Empty tables with the bounds of the pull sources (`holder`) and the
    /// replicas (`requester`).
    pub(super) fn new(holder: TableLimits, requester: TableLimits) -> RowTables {
        RowTables {
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

    /// New bounds for every table, applied at the next eviction.
    pub(super) fn set_limits(&self, limits: TableLimits) {
        self.sources.set_limits(limits);
        self.mirrors.set_limits(limits);
        self.errors.set_limits(limits);
    }

    /// Drops row contexts idle too long or beyond their tables' memory.
    pub(super) fn evict(&self, now: Instant) {
        self.sources.evict(now);
        self.mirrors.evict(now);
        self.errors.evict(now);
    }

    /// Rows and bytes held: holder mirrors, requester mirrors, error buffers.
    pub fn sizes(&self) -> [TableStats; 3] {
        [
            self.sources.stats(),
            self.mirrors.stats(),
            self.errors.stats(),
        ]
    }

    /// What a requester says when asking for `key`'s rows: its mirror of
    /// gathered rows (`gathered`), or just that it speaks rows.
    pub fn announce(&self, key: &TensorKey, gathered: bool, now: Instant) -> RowsHeader {
        let mut header = RowsHeader {
            epoch: 0,
            version: 0,
            max_bytes: self.max_bytes(),
        };
        if gathered {
            if let Some(mirror) = self.mirrors.get(key, now) {
                let mirror = lock(&mirror);
                header.epoch = mirror.0.epoch();
                header.version = mirror.0.version();
            }
        }
        header
    }

    /// Holder side: encodes `values` into `out` by row id through the
    /// rows' memory for `key`; `codec` codes deltas and pushed rows.
    pub(super) fn encode(
        &self,
        key: &TensorKey,
        values: &[f32],
        (memory, codec, token, entropy): (RowMemory<'_>, Codec, u64, EntropyStage),
        (epochs, now): (&EpochGenerator, Instant),
        out: &mut Vec<u8>,
    ) -> Result<Encoded, RowsRefused> {
        let ids = memory.ids;
        let width = row_width(memory.dims, ids.len(), values.len()).ok_or(RowsRefused::Shape)?;
        let max_bytes = memory.asked.max_bytes.min(self.max_bytes());
        let max_rows = rows_within(max_bytes, width);
        if memory.kind == RowKind::PushedApplied && !all_distinct(ids) {
            // Applied row by row: a duplicate id would be applied twice,
            // once with its row and once with the zeros its later
            // positions decode to.
            return Err(RowsRefused::DuplicateIds);
        }
        let encoded = UNIQUES.with(|uniques| {
            let mut uniques = uniques.borrow_mut();
            if memory.kind == RowKind::Gathered {
                let fresh = || Mirror(RowMirror::new(epochs.next().get(), width, max_rows));
                let mirror = self
                    .sources
                    .get_or_insert_within(key, now, 0, fresh)
                    .ok_or(RowsRefused::TableFull)?;
                let mut mirror = lock(&mirror);
                let asked = memory.asked;
                let agreed = (mirror.0.epoch(), mirror.0.version()) == (asked.epoch, asked.version)
                    || (mirror.0.version() == 0 && asked.version == 0);
                if !agreed || mirror.0.dim() != width {
                    // The requester holds other rows (or none): start over.
                    *mirror = fresh();
                }
                mirror.0.set_entropy_stage(entropy);
                mirror.0.set_refinement(memory.refine);
                let keyframe = &memory.keyframe;
                mirror
                    .0
                    .encode(ids, values, keyframe, &codec, token, &mut uniques, out)
            } else {
                let fresh = || Errors(RowErrors::new(width, max_rows));
                let errors = self
                    .errors
                    .get_or_insert_within(key, now, 0, fresh)
                    .ok_or(RowsRefused::TableFull)?;
                let mut errors = lock(&errors);
                if errors.0.rows() > 0 && errors.0.dim() != width {
                    *errors = fresh();
                }
                errors.0.set_entropy_stage(entropy);
                errors.0.set_refinement(memory.refine);
                errors
                    .0
                    .encode(ids, values, &codec, token, &mut uniques, out)
            }
            .map_err(|_| RowsRefused::Codec)
        })?;
        let counters = &self.counters;
        let misses = encoded.unique - encoded.hits;
        counters
            .hits
            .fetch_add(encoded.hits as u64, Ordering::Relaxed);
        counters.misses.fetch_add(misses as u64, Ordering::Relaxed);
        counters
            .evictions
            .fetch_add(encoded.evicted as u64, Ordering::Relaxed);
        Ok(Encoded {
            took: encoded.took,
            refinements: u64::from(encoded.refinements),
            ..Encoded::NOTHING
        })
    }

    /// Requester side: restores a row-keyed `envelope` for `key`, decoding
    /// at most `limits`, with the step's `ids`: a push alone, gathered rows
    /// into this side's mirror. A mirror that may differ from the holder's
    /// is dropped, so the next request starts over.
    pub(super) fn restore(
        &self,
        key: &TensorKey,
        (envelope, limits): (&[u8], &Limits),
        ids: &[i64],
        now: Instant,
    ) -> Result<(Vec<f32>, CodecId), String> {
        let parsed = &Envelope::parse(envelope, limits).map_err(|e| e.to_string())?;
        let section = parsed.rows().ok_or("a row-keyed envelope without rows")?;
        let codec = parsed
            .frames()
            .last()
            .map_or(CodecId::None, |f| f.header.codec());
        let mut values = Vec::new();
        UNIQUES.with(|uniques| {
            let mut uniques = uniques.borrow_mut();
            match parsed.header.kind {
                Kind::RowsPush => restore_push(ids, parsed, &mut uniques, &mut values)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Kind::RowsPull => {
                    let width = section.dim as usize;
                    let max_rows = section.max_rows as usize;
                    if rows_within(self.max_bytes(), width) < max_rows {
                        return Err("the holder keeps more rows than this side may".to_owned());
                    }
                    let header = parsed.header;
                    let fresh = || Mirror(RowMirror::new(header.epoch, width, max_rows));
                    let mirror = self
                        .mirrors
                        .get_or_insert_within(key, now, 0, fresh)
                        .ok_or("no room for the rows")?;
                    let mut mirror = lock(&mirror);
                    if header.base_version == 0 || mirror.0.epoch() != header.epoch {
                        *mirror = fresh();
                    }
                    let applied = mirror.0.apply(ids, parsed, &mut uniques, &mut values);
                    if applied.is_err() {
                        drop(mirror);
                        self.mirrors.remove(key);
                    }
                    applied.map(|_| ()).map_err(|e| e.to_string())
                }
                _ => Err("not a row-keyed envelope".to_owned()),
            }
        })?;
        Ok((values, codec))
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

#[cfg(test)]
mod tests {
    use super::super::{ContextLimits, Contexts, Encoding, Memory, RestoreError};
    use super::*;
    use std::time::Duration;
    use tlc_core::{Direction, TensorCall};

    fn contexts() -> Contexts {
        let table = TableLimits {
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(3600),
        };
        let limits = ContextLimits {
            push: table,
            pull: table,
            replicas: table,
            pull_cache_len: 4,
        };
        Contexts::new(limits, 11)
    }

    fn gathered_call(step_id: i64) -> TensorCall {
        TensorCall {
            tensor: "emb/Gather".into(),
            tensor_name: "edge_9_emb/Gather".into(),
            holder_task: "/job:ps/replica:0/task:0".into(),
            holder_incarnation: 1,
            requester_task: "/job:worker/replica:0/task:0".into(),
            direction: Direction::Pull,
            step_id,
        }
    }

    /// Gathered rows of shape `dims` for `ids`, lossless, no refinement.
    fn gathered<'a>(ids: &'a [i64], dims: &'a [u64], asked: RowsHeader) -> RowMemory<'a> {
        RowMemory {
            ids,
            dims,
            kind: RowKind::Gathered,
            asked,
            keyframe: Codec::None,
            refine: Refinement::OFF,
        }
    }

    /// `memory`'s rows with lossless deltas, no entropy stage.
    fn lossless(memory: RowMemory<'_>) -> Encoding<'_> {
        Encoding {
            codec: Codec::None,
            memory: Memory::Rows(memory),
            fallback_token: 5,
            entropy: EntropyStage::Off,
            mirror: false,
        }
    }

    /// Encodes `values` (rows of 2 for `ids`) through `holder`'s rows for
    /// a requester that announced `asked`, and restores them on
    /// `requester` with the same ids.
    fn cross(
        (holder, requester): (&Contexts, &Contexts),
        call: &TensorCall,
        ids: &[i64],
        values: &[f32],
    ) -> Result<Vec<f32>, RestoreError> {
        let now = Instant::now();
        let asked = requester.rows().announce(&call.key(), true, now);
        let dims = [ids.len() as u64, 2];
        let encoding = lossless(gathered(ids, &dims, asked));
        let mut envelope = Vec::new();
        holder
            .encode(call, values, encoding, now, &mut envelope)
            .map_err(|e| RestoreError::Rows(e.to_string()))?;
        let limits = Limits { max_elements: 64 };
        let restored = requester.restore(
            call,
            (&envelope, Some(ids)),
            &limits,
            now,
            |v| v,
            |_| unreachable!("rows are restored whole"),
        )?;
        Ok(restored.content)
    }

    #[test]
    fn gathered_rows_cross_through_both_doors_and_stay_mirrored() {
        let (holder, requester) = (contexts(), contexts());
        let first = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0];
        let restored = cross((&holder, &requester), &gathered_call(1), &[7, 9, 7], &first);
        assert_eq!(restored.ok().as_deref(), Some(&first[..]));
        // The next step holds row 9 already: a delta against the mirror.
        let second = [3.5, 4.5, 0.5, 0.25];
        let restored = cross((&holder, &requester), &gathered_call(2), &[9, 2], &second);
        assert_eq!(restored.ok().as_deref(), Some(&second[..]));
        assert_eq!(holder.rows().counters.hits.load(Ordering::Relaxed), 1);
        assert_eq!(holder.rows().counters.misses.load(Ordering::Relaxed), 3);
        assert_eq!(holder.rows().sizes()[0].contexts, 1);
        assert_eq!(requester.rows().sizes()[1].contexts, 1);
    }

    #[test]
    fn rows_without_their_ids_or_with_other_ids_are_refused() {
        let (holder, requester) = (contexts(), contexts());
        let call = gathered_call(1);
        let values = [1.0, 2.0, 3.0, 4.0];
        let now = Instant::now();
        let asked = requester.rows().announce(&call.key(), true, now);
        let encoding = lossless(gathered(&[1, 2], &[2, 2], asked));
        let mut envelope = Vec::new();
        assert!(holder
            .encode(&call, &values, encoding, now, &mut envelope)
            .is_ok());
        let limits = Limits { max_elements: 64 };
        let whole = |v: Vec<f32>| v;
        let copy = |_: &[f32]| Vec::new();
        let without = requester.restore(&call, (&envelope, None), &limits, now, whole, copy);
        assert!(matches!(without, Err(RestoreError::NoIds(Kind::RowsPull))));
        let other = requester.restore(&call, (&envelope, Some(&[1, 3])), &limits, now, whole, copy);
        assert!(matches!(other, Err(RestoreError::Rows(_))));
        // A shape that is not [ids, ...] is refused before any table.
        let encoding = lossless(gathered(&[1, 2], &[4], asked));
        let refused = holder.encode(&call, &values, encoding, now, &mut Vec::new());
        assert_eq!(
            refused,
            Err(super::super::EncodeRefused::Rows(RowsRefused::Shape))
        );
    }

    #[test]
    fn a_repeated_id_is_found_wherever_it_is() {
        assert!(all_distinct(&[]));
        assert!(all_distinct(&[3, 1, 2]));
        assert!(!all_distinct(&[3, 1, 3]));
        assert!(!all_distinct(&[7, 7]));
        // The scratch is reused: an earlier call leaves nothing behind.
        assert!(all_distinct(&[7]));
    }

    #[test]
    fn rows_are_the_first_dimension_and_match_the_ids() {
        assert_eq!(row_width(&[3, 4], 3, 12), Some(4));
        assert_eq!(row_width(&[3, 2, 2], 3, 12), Some(4));
        assert_eq!(row_width(&[3, 4], 2, 12), None);
        assert_eq!(row_width(&[3, 0], 3, 0), None);
        assert_eq!(row_width(&[], 0, 0), None);
    }
}
