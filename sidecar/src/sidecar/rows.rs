//! Which tensors go through row memory, and the ids they are keyed by:
//! the tensors the graph pairs with the ids that cross beside them
//! ([`crate::graph::RowKeyed`]). The rows themselves are kept behind the
//! context's doors ([`tlc_context::Memory::Rows`], `tlc-context`'s
//! `contexts/rows.rs`: a mirror of the requester's rows for pulls, an
//! error buffer per row id for pushes); this module finds the step's ids
//! ([`super::row_ids`]) and says what the rows get: the codecs, the
//! refinement, whether they cross exactly.
//!
//! Whenever anything is missing (no pairing, no ids, a requester that does
//! not speak rows, a shape that is not `[ids, ...]`), the tensor gets
//! `[policy.sparse]` without memory, as before; a requester that cannot
//! restore a row-keyed envelope fetches the original.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tlc_codec::Codec;
use tlc_context::{RowKind, RowMemory};
use tlc_core::TensorCall;
use tlc_wire::envelope::Kind;
use tlc_wire::peer::RowsHeader;

use super::row_ids::IdsKey;
use super::Sidecar;
use crate::graph::{Classified, RowRole, Training};

/// How long rows wait for ids still on their way; then the original is
/// fetched.
const IDS_PATIENCE: Duration = Duration::from_secs(2);

/// The row memory a holder encodes a tensor through: everything but the
/// ids, which it borrows from [`RowsFound::ids`].
pub struct RowsFound {
    /// The step's lookup ids.
    pub ids: Arc<[i64]>,
    /// Which rows these are.
    pub kind: RowKind,
    /// The codec of deltas and pushed rows.
    pub codec: Codec,
    /// The codec of rows new to the requester.
    pub keyframe: Codec,
    /// How far the rows' memory may lag.
    pub refine: tlc_context::Refinement,
}

impl RowsFound {
    /// The memory to encode the tensor of shape `dims` through, for a
    /// requester that said `asked`.
    pub fn memory<'a>(&'a self, dims: &'a [u64], asked: RowsHeader) -> RowMemory<'a> {
        RowMemory {
            ids: &self.ids,
            dims,
            kind: self.kind,
            asked,
            keyframe: self.keyframe,
            refine: self.refine,
        }
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

impl Sidecar {
    /// Holder side: the row memory `call`'s tensor goes through, if it is
    /// row-keyed, row memory is on and this side saw its step's ids;
    /// `exact` rows cross losslessly (to settle what the link decision's
    /// raw calls left behind). `None`: encode as before.
    pub(crate) fn rows_for(
        &self,
        call: &TensorCall,
        classified: &Classified,
        exact: bool,
    ) -> Option<RowsFound> {
        let rows = classified.rows.as_ref()?;
        let policy = self.policy();
        let kind = match rows.role {
            RowRole::Ids => return None,
            RowRole::Gathered => RowKind::Gathered,
            RowRole::Slices => RowKind::Pushed,
            RowRole::SlicesApplied => RowKind::PushedApplied,
        };
        if !policy.row_memory() {
            return None;
        }
        let Some(ids) = self.row_ids.get(&ids_key(call, &rows.ids, rows.role)) else {
            let counters = &self.contexts.rows().counters;
            counters.no_ids.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (codec, keyframe) = if exact {
            (Codec::None, Codec::None)
        } else {
            (
                policy.row_codec(call.direction),
                policy.row_keyframe_codec(),
            )
        };
        let refine = policy.refine();
        let refine = if kind == RowKind::Gathered {
            // The bound a dense replica of this task's model keeps.
            let synchronous = self.graphs.training(&call.holder_task) == Training::Synchronous;
            refine.rows(refine.pull(synchronous))
        } else {
            // A row's error waits for the row's next push, often many
            // steps: bounded as a gradient applied on arrival.
            refine.rows(refine.push(false, false))
        };
        Some(RowsFound {
            ids,
            kind,
            codec,
            keyframe,
            refine,
        })
    }

    /// Requester side: the step's ids for a row-keyed envelope of `call`,
    /// once they crossed (waiting a while at most for ids still on their
    /// way); `None` if this side's graphs do not pair the tensor with ids,
    /// or the ids did not come.
    pub(crate) async fn row_ids_for(
        &self,
        call: &TensorCall,
        known: Option<&Classified>,
    ) -> Option<Arc<[i64]>> {
        let rows = known.and_then(|k| k.rows.as_ref())?;
        let key = ids_key(call, &rows.ids, rows.role);
        self.row_ids.wait_for(&key, IDS_PATIENCE).await
    }

    /// The row contexts, for counters and tables.
    pub fn row_contexts(&self) -> &tlc_context::RowTables {
        self.contexts.rows()
    }

    /// Requester side: what to say of `call`'s rows when asking for them
    /// (`tlc-rows`): its mirror of gathered rows, or that it speaks rows.
    pub(crate) fn announce_rows(
        &self,
        call: &TensorCall,
        role: RowRole,
        now: Instant,
    ) -> RowsHeader {
        let gathered = role == RowRole::Gathered;
        self.contexts.rows().announce(&call.key(), gathered, now)
    }
}

/// Whether an envelope (its header's kind byte) is row-keyed.
pub fn is_rows_envelope(envelope: &[u8]) -> bool {
    tlc_wire::envelope::EnvelopeHeader::parse(envelope)
        .is_ok_and(|h| matches!(h.kind, Kind::RowsPull | Kind::RowsPush))
}
