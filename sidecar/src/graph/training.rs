//! Whether a parameter task trains synchronously, as far as its graphs say.
//!
//! A task that holds variables receives their dense gradients. Under
//! `SyncReplicasOptimizer` every one of them goes into an accumulator
//! (`AccumulatorApplyGradient`) and is applied once all workers' are in:
//! the model moves once per step, after every worker has read it. Otherwise
//! (TF1 without the wrapper, TF2's ParameterServerStrategy) each gradient
//! is applied on arrival and the model moves between any two reads. Pull
//! refinement depends on the difference (see [`tlc_context::refine`]),
//! so the graph index keeps, per receiving task, which of the two it saw.

use std::collections::HashMap;
use std::sync::Mutex;

/// How a task's variables are updated, as far as the graphs seen say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Training {
    /// No dense gradient received by the task has been seen.
    Unknown,
    /// Every dense gradient seen goes into an accumulator.
    Synchronous,
    /// At least one dense gradient is applied on arrival.
    Asynchronous,
}

/// Tasks remembered at most: a hostile registration naming made-up tasks
/// must not grow the ledger. Beyond it, new tasks stay [`Training::Unknown`]
/// (the safe answer).
pub const MAX_TASKS: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    applied: bool,
    accumulated: bool,
    adaptive: bool,
}

/// What the graphs said of each receiving task's dense gradients.
#[derive(Debug, Default)]
pub struct TrainingLedger {
    tasks: Mutex<HashMap<String, Seen>>,
}

impl TrainingLedger {
    /// Records a dense gradient received by `task`, applied on arrival or
    /// accumulated.
    pub fn saw_gradient(&self, task: &str, applied_on_arrival: bool) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if !tasks.contains_key(task) && tasks.len() >= MAX_TASKS {
            return;
        }
        let seen = tasks.entry(task.to_owned()).or_default();
        if applied_on_arrival {
            seen.applied = true;
        } else {
            seen.accumulated = true;
        }
    }

    /// Records that a graph applies some gradient on `task` with an
    /// adaptive optimizer (`ApplyAdam`, ...). Under `SyncReplicasOptimizer`
    /// only the chief's graph shows the apply op, behind the accumulators
    /// every worker's gradient goes into: which optimizer a task runs is
    /// known per task, not per gradient.
    pub fn saw_adaptive(&self, task: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if !tasks.contains_key(task) && tasks.len() >= MAX_TASKS {
            return;
        }
        tasks.entry(task.to_owned()).or_default().adaptive = true;
    }

    /// Whether any graph seen applies a gradient on `task` with an
    /// adaptive optimizer.
    pub fn adaptive(&self, task: &str) -> bool {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.get(task).is_some_and(|seen| seen.adaptive)
    }

    /// How `task` trains: asynchronous as soon as one gradient is applied
    /// on arrival, synchronous only if every gradient seen is accumulated.
    pub fn training(&self, task: &str) -> Training {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        match tasks.get(task) {
            Some(Seen { applied: true, .. }) => Training::Asynchronous,
            Some(Seen {
                accumulated: true, ..
            }) => Training::Synchronous,
            _ => Training::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adaptive_optimizer_is_known_per_task() {
        let ledger = TrainingLedger::default();
        assert!(!ledger.adaptive(PS));
        ledger.saw_gradient(PS, false);
        assert!(!ledger.adaptive(PS), "a gradient alone says nothing");
        ledger.saw_adaptive(PS);
        assert!(ledger.adaptive(PS));
        assert_eq!(ledger.training(PS), Training::Synchronous);
        assert!(!ledger.adaptive("/job:ps/replica:0/task:1"));
    }

    const PS: &str = "/job:ps/replica:0/task:0";

    #[test]
    fn one_gradient_applied_on_arrival_makes_a_task_asynchronous() {
        let ledger = TrainingLedger::default();
        assert_eq!(ledger.training(PS), Training::Unknown);
        ledger.saw_gradient(PS, false);
        ledger.saw_gradient(PS, false);
        assert_eq!(ledger.training(PS), Training::Synchronous);
        ledger.saw_gradient(PS, true);
        assert_eq!(ledger.training(PS), Training::Asynchronous);
        ledger.saw_gradient(PS, false);
        assert_eq!(ledger.training(PS), Training::Asynchronous);
        assert_eq!(
            ledger.training("/job:ps/replica:0/task:1"),
            Training::Unknown
        );
    }

    #[test]
    fn the_ledger_is_bounded() {
        let ledger = TrainingLedger::default();
        for i in 0..MAX_TASKS + 10 {
            ledger.saw_gradient(&format!("/job:ps/replica:0/task:{i}"), false);
        }
        assert_eq!(ledger.tasks.lock().unwrap().len(), MAX_TASKS);
        let late = format!("/job:ps/replica:0/task:{}", MAX_TASKS + 5);
        assert_eq!(ledger.training(&late), Training::Unknown);
    }
}
