//! `tlc-ack`: the requester says which envelopes it restored, so that the
//! holder drops their originals at once instead of keeping them for a
//! fallback that will not come ([`super::fallback`]).
//!
//! One capability in the shape every capability of the call takes: the
//! field [`Ask::acks`](tlc_wire::negotiation::Ask) (written and read in
//! `tlc-wire`'s negotiation), the requester's [`Acks`] (a field of its
//! side's state), three stage steps ([`restored`], [`ask`], [`release`])
//! called from the sides' stages, and one counter
//! (`tlc_fallbacks_total{side="released"}`).

use std::collections::HashMap;
use std::sync::Mutex;

use tlc_core::TensorCall;
use tlc_wire::negotiation::Ask;
use tlc_wire::peer;

use super::Sidecar;

/// The requester's side: fallback tokens of envelopes restored, per
/// holder task, until the next call to that holder carries them
/// (`tlc-ack`).
#[derive(Debug, Default)]
pub struct Acks(Mutex<HashMap<String, Vec<u64>>>);

/// Tokens waiting per holder at most; older ones are left to the holder's
/// own bounds.
const MAX_WAITING_ACKS: usize = 4 * peer::MAX_ACKS;
/// Holders with tokens waiting at most (a job's tasks).
const MAX_ACK_HOLDERS: usize = 4096;

impl Acks {
    /// Notes that the envelope of `token` from `holder` was restored.
    pub fn restored(&self, holder: &str, token: u64) {
        let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !waiting.contains_key(holder) && waiting.len() >= MAX_ACK_HOLDERS {
            return;
        }
        let tokens = waiting.entry(holder.to_owned()).or_default();
        if tokens.len() >= MAX_WAITING_ACKS {
            tokens.remove(0);
        }
        tokens.push(token);
    }

    /// The tokens the next call to `holder` acknowledges (its `tlc-ack`),
    /// taking up to [`peer::MAX_ACKS`] of them.
    pub fn take(&self, holder: &str) -> Vec<u64> {
        let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tokens) = waiting.get_mut(holder) else {
            return Vec::new();
        };
        let taken: Vec<u64> = tokens.drain(..tokens.len().min(peer::MAX_ACKS)).collect();
        if tokens.is_empty() {
            waiting.remove(holder);
        }
        taken
    }
}

/// Requester, after a restore: the envelope of `token` from `call`'s
/// holder is done with, said on the next call to it.
pub(super) fn restored(sidecar: &Sidecar, call: &TensorCall, token: u64) {
    sidecar.requester.acks.restored(&call.holder_task, token);
}

/// Requester, asking: the envelopes restored since the last call to
/// `call`'s holder.
pub(super) fn ask(sidecar: &Sidecar, call: &TensorCall, ask: &mut Ask) {
    ask.acks = sidecar.requester.acks.take(&call.holder_task);
}

/// Holder, on a peer's call: drops the originals of the envelopes the
/// requester acknowledged.
pub(super) fn release(sidecar: &Sidecar, ask: &Ask) {
    if !ask.acks.is_empty() {
        let released = sidecar.holder.fallbacks.release(&ask.acks);
        sidecar.stats.fallbacks_released(released);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_wait_per_holder_and_leave_at_most_sixty_four_a_call() {
        let acks = Acks::default();
        assert!(acks.take("ps").is_empty());
        for token in 0..100 {
            acks.restored("ps", token);
        }
        acks.restored("worker", 7);
        assert_eq!(acks.take("ps"), (0..64).collect::<Vec<_>>());
        assert_eq!(acks.take("ps"), (64..100).collect::<Vec<_>>());
        assert!(acks.take("ps").is_empty());
        assert_eq!(acks.take("worker"), [7]);
    }

    #[test]
    fn the_oldest_tokens_go_beyond_the_bound() {
        let acks = Acks::default();
        assert!(acks.take("/job:ps/replica:0/task:0").is_empty());
        acks.restored("/job:ps/replica:0/task:0", 1);
        acks.restored("/job:ps/replica:0/task:1", 2);
        acks.restored("/job:ps/replica:0/task:0", 3);
        assert_eq!(acks.take("/job:ps/replica:0/task:0"), [1, 3]);
        assert!(acks.take("/job:ps/replica:0/task:0").is_empty());
        for token in 0..(MAX_WAITING_ACKS as u64 + 5) {
            acks.restored("/job:ps/replica:0/task:1", token);
        }
        let taken = acks.take("/job:ps/replica:0/task:1");
        assert_eq!(taken.len(), peer::MAX_ACKS);
        // The oldest went first: 2 and the first five tokens are gone.
        assert_eq!(taken.first(), Some(&5));
    }
}
