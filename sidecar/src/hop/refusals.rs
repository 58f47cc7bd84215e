//! Calls hop compression refuses to hold any longer: a peer's compressed
//! request that the in-flight budget cannot hold or that does not arrive
//! in time, an answer that would restore to more than one answer may.
//! Each is counted (`tlc_hop_refused_total`) and logged, at most once per
//! [`LOG_EVERY`] per kind: the peer that causes them can cause them as
//! fast as it likes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{error, warn};

/// Least time between two log lines of one kind of refusal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why hop compression refused to hold a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Holder side: a compressed request the in-flight budget could not
    /// hold while it was gathered.
    GatherBudget,
    /// Holder side: a compressed request that did not end within
    /// `limits.gather_seconds`.
    GatherTime,
    /// Requester side: an answer that would restore to more than
    /// `limits.max_tensor_mib`.
    AnswerTooLarge,
}

impl Refusal {
    /// Every kind, in the order of [`RefusedTotals`].
    pub const ALL: [Refusal; 3] = [
        Refusal::GatherBudget,
        Refusal::GatherTime,
        Refusal::AnswerTooLarge,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::GatherBudget => "gather_memory_budget",
            Refusal::GatherTime => "gather_time",
            Refusal::AnswerTooLarge => "answer_too_large",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Refusals counted so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusedTotals {
    /// [`Refusal::GatherBudget`].
    pub gather_budget: u64,
    /// [`Refusal::GatherTime`].
    pub gather_time: u64,
    /// [`Refusal::AnswerTooLarge`].
    pub answer_too_large: u64,
}

impl RefusedTotals {
    /// The count of `refusal`.
    pub fn of(&self, refusal: Refusal) -> u64 {
        match refusal {
            Refusal::GatherBudget => self.gather_budget,
            Refusal::GatherTime => self.gather_time,
            Refusal::AnswerTooLarge => self.answer_too_large,
        }
    }
}

/// The counts, and when each kind was last logged.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    counts: [AtomicU64; 3],
    /// Refusals of each kind since its last log line.
    unlogged: [AtomicU64; 3],
    logged: Mutex<[Option<Instant>; 3]>,
}

impl Refusals {
    /// Counts one `refusal` of a call (`call`: its path, or the peer whose
    /// answer it was), and logs it unless one of its kind was logged lately
    /// (the line then says how many were not).
    pub(super) fn refused(&self, refusal: Refusal, call: &str, detail: &dyn std::fmt::Display) {
        let at = refusal.index();
        self.counts[at].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        {
            let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
            if logged[at].is_some_and(|last| now.saturating_duration_since(last) < LOG_EVERY) {
                self.unlogged[at].fetch_add(1, Ordering::Relaxed);
                return;
            }
            logged[at] = Some(now);
        }
        let unlogged = self.unlogged[at].swap(0, Ordering::Relaxed);
        let reason = refusal.name();
        match refusal {
            Refusal::GatherBudget | Refusal::GatherTime => warn!(
                path = %call, reason, %detail, unlogged,
                "refused a peer's hop-compressed request (its sidecar sends it again uncompressed); \
                 `unlogged` more since the last line"
            ),
            // TensorFlow's call fails: loud.
            Refusal::AnswerTooLarge => error!(
                peer = %call, reason, %detail, unlogged,
                "a peer's sidecar sent an answer that restores to more than limits.max_tensor_mib; \
                 the call failed with RESOURCE_EXHAUSTED; `unlogged` more since the last line"
            ),
        }
    }

    pub(super) fn totals(&self) -> RefusedTotals {
        let read = |r: Refusal| self.counts[r.index()].load(Ordering::Relaxed);
        RefusedTotals {
            gather_budget: read(Refusal::GatherBudget),
            gather_time: read(Refusal::GatherTime),
            answer_too_large: read(Refusal::AnswerTooLarge),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_counted_whether_logged_or_not() {
        let refusals = Refusals::default();
        for _ in 0..5 {
            refusals.refused(Refusal::GatherTime, "/x.Y/Z", &"late");
        }
        refusals.refused(Refusal::AnswerTooLarge, "/x.Y/Z", &"large");
        let totals = refusals.totals();
        assert_eq!(totals.of(Refusal::GatherTime), 5);
        assert_eq!(totals.of(Refusal::AnswerTooLarge), 1);
        assert_eq!(totals.of(Refusal::GatherBudget), 0);
        // Logged once, four held back until the next line.
        assert_eq!(
            refusals.unlogged[Refusal::GatherTime.index()].load(Ordering::Relaxed),
            4
        );
    }
}
