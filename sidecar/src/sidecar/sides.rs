//! What each side of a call keeps for itself, apart from what both sides
//! share (the contexts, the graphs, the counters, the budget): the
//! holder's originals, classes, counts and link decisions, and the
//! requester's acknowledgements. A sidecar is both sides at once (a worker
//! asks for values and holds gradients), so it keeps both.

use crate::link::Payoffs;
use crate::sidecar::acks::Acks;
use crate::sidecar::classes::ClassRecord;
use crate::sidecar::fallback::FallbackCache;
use crate::sidecar::warmup::Count;
use tlc_context::ContextTable;
use tlc_core::TensorKey;

/// The holder's side: what it sent compressed, and what it decided.
pub struct HolderState {
    /// Original responses kept for fallbacks.
    pub(crate) fallbacks: FallbackCache,
    /// Each tensor's class and treatment.
    pub(crate) classes: ContextTable<TensorKey, ClassRecord>,
    /// Steps each dense tensor has crossed in warm-up.
    pub(crate) warmup: ContextTable<TensorKey, Count>,
    /// Calls of each tensor, while `[policy.check] exact_at_call` is set.
    pub(crate) calls: ContextTable<TensorKey, Count>,
    /// Per tensor and requester, whether compressing pays.
    pub(crate) payoffs: Payoffs,
}

/// The requester's side: what it owes its holders.
#[derive(Default)]
pub struct RequesterState {
    /// Envelopes restored, to acknowledge to their holder.
    pub(crate) acks: Acks,
}
