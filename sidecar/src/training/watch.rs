//! The step watch: every read of the step counter that crosses this
//! sidecar, remembered, so that a counter going back is seen and named.
//!
//! # The rule
//!
//! A counter is one step counter node on one holder task *incarnation*
//! (a new process of the task, or a new job on a long-lived tlcd, is a new
//! counter that starts fresh and is never a regression). Per requester
//! task, the last value it read is kept; per counter, the lowest and the
//! highest value any requester read. Within one requester, reads are
//! sequential (one per step, each answered before the next step runs), so
//! its values never decrease unless the model went back. When a requester
//! reads a value lower than its previous one:
//!
//! - value ≤ 0 (and ≤ the counter's lowest): a **reset**. The model went
//!   back to its start (TensorFlow creates the global step at 0): it
//!   re-initialised the variables (a session was rebuilt after a broken
//!   connection, and there was no checkpoint to restore), or restored the
//!   checkpoint `MonitoredTrainingSession` writes at step 0, which is the
//!   same loss. Not "≤ the lowest seen" alone: a sidecar started mid-run
//!   has seen no start, and would take a checkpoint restore for a reset.
//!   With `recovery.on_model_reset = "fail"` the read is answered with an
//!   error, and so is every later read of that counter by any requester
//!   (sticky), so every worker stops; with `"warn"` it passes. An error is
//!   logged either way.
//! - otherwise a **rewind**: a checkpoint restore, TensorFlow's own designed
//!   recovery. It passes, with a warning.
//!
//! One event is logged and counted once: a requester that had not read
//! since the last event and now reads a lower value is seeing that same
//! event. Reads of different requesters are never compared with each
//! other (worker A at 101 then worker B at 100 is ordinary).

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tlc_admin_api::status::{StepEvent, Training};
use tracing::{error, warn};

use super::bounded::Bounded;
use crate::training::recovery::{OnModelReset, RecoverySettings};
use tlc_wire::tf::rendezvous::TaskName;

/// Most counters and most (counter, requester) pairs kept.
pub const MAX_ENTRIES: usize = 4096;

/// One read of a step counter, as the rendezvous key names it.
#[derive(Debug, Clone, Copy)]
pub struct StepRead<'a> {
    /// The task holding the counter (`/job:ps/replica:0/task:0`).
    pub holder: &'a str,
    /// The holder's incarnation.
    pub incarnation: u64,
    /// The task that read it.
    pub requester: &'a str,
    /// The node read (`global_step/read`).
    pub node: &'a str,
}

/// What the data path does with a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Hand the response on unchanged.
    Pass,
    /// Answer with `FAILED_PRECONDITION` and this message.
    Fail(String),
}

/// A point in time, both as the clock that measures stalls and as the
/// wall-clock time operators read.
#[derive(Debug, Clone, Copy)]
pub struct Moment {
    /// Monotonic.
    pub instant: Instant,
    /// Seconds since the Unix epoch.
    pub unix_seconds: f64,
}

impl Moment {
    /// Now.
    pub fn now() -> Moment {
        Moment {
            instant: Instant::now(),
            unix_seconds: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

/// A step counter: one node on one holder incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CounterKey {
    holder: String,
    incarnation: u64,
    node: String,
}

#[derive(Debug)]
struct Counter {
    lowest: i64,
    highest: i64,
    /// The highest value read since the counter last went back.
    current: i64,
    /// Events so far; a requester's reads are compared with its own last
    /// value only if it saw the same number of events.
    generation: u64,
    /// Set when a reset failed the job: every later read fails with it.
    failed: Option<String>,
}

#[derive(Debug)]
struct Requester {
    last: i64,
    generation: u64,
}

#[derive(Debug)]
struct State {
    settings: RecoverySettings,
    counters: Bounded<CounterKey, Counter>,
    requesters: Bounded<(CounterKey, String), Requester>,
    step: Option<i64>,
    advanced: Option<Moment>,
    stall_warned: bool,
    /// When TensorFlow made a new session after training had advanced (a
    /// rebuild after a broken connection), and the highest step read by
    /// then; until the step goes past it.
    rebuilt: Option<(Instant, i64)>,
    /// The highest step read, any counter.
    highest: Option<i64>,
    /// When a step counter was last read.
    last_read: Option<Instant>,
    stalls_failed: u64,
    resets_failed: u64,
    resets_warned: u64,
    rewinds: u64,
    last_reset: Option<StepEvent>,
    last_rewind: Option<StepEvent>,
}

/// What a read turned out to be, logged once the lock is released.
enum Seen {
    Reset(StepEvent, String),
    Rewind(StepEvent),
}

/// Every step counter read this sidecar saw; see the module's doc.
#[derive(Debug)]
pub struct StepWatch {
    state: Mutex<State>,
}

impl Default for StepWatch {
    /// The default `[recovery]` settings, [`MAX_ENTRIES`].
    fn default() -> Self {
        StepWatch::new(RecoverySettings::default(), MAX_ENTRIES)
    }
}

impl StepWatch {
    /// A watch that has seen nothing, keeping at most `max_entries`
    /// counters and as many (counter, requester) pairs.
    pub fn new(settings: RecoverySettings, max_entries: usize) -> StepWatch {
        StepWatch {
            state: Mutex::new(State {
                settings,
                counters: Bounded::new(max_entries),
                requesters: Bounded::new(max_entries),
                step: None,
                advanced: None,
                stall_warned: false,
                rebuilt: None,
                highest: None,
                last_read: None,
                stalls_failed: 0,
                resets_failed: 0,
                resets_warned: 0,
                rewinds: 0,
                last_reset: None,
                last_rewind: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `settings` in force from the next read on.
    pub fn configure(&self, settings: RecoverySettings) {
        self.lock().settings = settings;
    }

    /// The settings in force.
    pub fn settings(&self) -> RecoverySettings {
        self.lock().settings
    }

    /// Counters and (counter, requester) pairs held.
    pub fn entries(&self) -> (usize, usize) {
        let state = self.lock();
        (state.counters.len(), state.requesters.len())
    }

    /// Takes one read of `value` at `at`: what to answer, and the event
    /// logged (once) and counted if the counter went back.
    pub fn observe(&self, read: StepRead<'_>, value: i64, at: Moment) -> Verdict {
        let (verdict, seen) = self.lock().observe(read, value, at);
        match seen {
            Some(Seen::Reset(event, message)) => {
                error!(
                    holder = %event.holder,
                    counter = %event.counter,
                    from = event.from,
                    to = event.to,
                    requester = read.requester,
                    "{message}"
                );
            }
            Some(Seen::Rewind(event)) => {
                warn!(
                    holder = %event.holder,
                    counter = %event.counter,
                    from = event.from,
                    to = event.to,
                    requester = read.requester,
                    "TensorFlow restored an earlier model: {} on {} went back from {} to {} \
                     (a checkpoint restore after a failure, TensorFlow's own recovery); \
                     the steps since that checkpoint are trained again",
                    event.counter,
                    short_task(&event.holder),
                    event.from,
                    event.to
                );
            }
            None => {}
        }
        verdict
    }

    /// TensorFlow made a new session (a `CreateWorkerSession` call crossed
    /// this sidecar). After the step has advanced, that is a session
    /// rebuilt after a failure (or a script's extra session); if the step
    /// then does not advance for `recovery.stall_fail_seconds`, the job
    /// is stuck (see [`StepWatch::stuck_after_rebuild`]).
    /// Returns the step reached, when this counts as a rebuild.
    pub fn session_created(&self, now: Instant) -> Option<i64> {
        let mut state = self.lock();
        let highest = state.highest.filter(|_| state.advanced.is_some())?;
        state.rebuilt.get_or_insert((now, highest));
        Some(highest)
    }

    /// The error to fail the calls in progress with when a session was
    /// rebuilt, the step has not gone past where it was, and no step was
    /// read for `recovery.stall_fail_seconds` (a job that trains, however
    /// slowly, reads it every step): TensorFlow's synchronous training can hang
    /// after a rebuilt session restored a checkpoint (its gradient
    /// accumulators and token queue are not in the checkpoint), and a
    /// job that hangs forever while every metric looks calm is worse than
    /// one that fails. Once per rebuild.
    pub fn stuck_after_rebuild(&self, now: Instant) -> Option<String> {
        let mut state = self.lock();
        let limit = state.settings.stall_fail_seconds;
        let (rebuilt, _) = state.rebuilt?;
        let quiet_since = state.last_read.map_or(rebuilt, |read| read.max(rebuilt));
        let stuck = now.saturating_duration_since(quiet_since).as_secs();
        if limit == 0 || stuck < limit {
            return None;
        }
        state.rebuilt = None;
        state.stalls_failed += 1;
        let step = state
            .step
            .map_or_else(|| "?".to_string(), |s| s.to_string());
        Some(format!(
            "tlcd: the training job is stuck: TensorFlow rebuilt a session (after a broken \
             connection) and no training step has run for {stuck} s (global step {step}); \
             synchronous training can hang after such a rebuild. tlcd fails the calls in progress \
             rather than let the job hang; set recovery.stall_fail_seconds = 0 to wait forever."
        ))
    }

    /// Jobs failed because they were stuck after a rebuilt session.
    pub fn stalls_failed(&self) -> u64 {
        self.lock().stalls_failed
    }

    /// Warns (once per stall) when the step advanced before and has not
    /// for `recovery.stall_warn_seconds`. Called periodically; returns
    /// whether it warned now.
    pub fn check_stall(&self, now: Instant) -> bool {
        let mut state = self.lock();
        let limit = state.settings.stall_warn_seconds;
        let (Some(advanced), Some(step)) = (state.advanced, state.step) else {
            return false;
        };
        let idle = now.saturating_duration_since(advanced.instant).as_secs();
        if limit == 0 || state.stall_warned || idle < limit {
            return false;
        }
        state.stall_warned = true;
        drop(state);
        warn!(
            seconds = idle,
            global_step = step,
            "no training progress for {idle} s: global step still {step}"
        );
        true
    }

    /// What the watch saw, at `now`.
    pub fn view(&self, now: Instant) -> Training {
        let state = self.lock();
        Training {
            global_step: state.step,
            seconds_since_advanced: state
                .advanced
                .map(|a| now.saturating_duration_since(a.instant).as_secs_f64()),
            advanced_unix_time: state.advanced.map(|a| a.unix_seconds),
            resets: state.resets_failed + state.resets_warned,
            resets_failed: state.resets_failed,
            resets_warned: state.resets_warned,
            rewinds: state.rewinds,
            last_reset: state.last_reset.clone(),
            last_rewind: state.last_rewind.clone(),
            on_model_reset: state.settings.on_model_reset.name().to_string(),
            stalls_failed: state.stalls_failed,
        }
    }
}

impl State {
    fn observe(&mut self, read: StepRead<'_>, value: i64, at: Moment) -> (Verdict, Option<Seen>) {
        let key = CounterKey {
            holder: read.holder.to_owned(),
            incarnation: read.incarnation,
            node: read.node.to_owned(),
        };
        let fail = self.settings.on_model_reset == OnModelReset::Fail;
        let counter = self.counters.get_or_insert_with(&key, || Counter {
            lowest: value,
            highest: value,
            current: value,
            generation: 0,
            failed: None,
        });
        if let (true, Some(message)) = (fail, &counter.failed) {
            // Sticky: every worker stops, not only the one that saw it.
            return (Verdict::Fail(message.clone()), None);
        }
        let previous = self
            .requesters
            .get_mut(&(key.clone(), read.requester.to_owned()))
            .map(|r| (r.last, r.generation));
        let went_back =
            previous.filter(|&(last, generation)| value < last && generation == counter.generation);
        let mut verdict = Verdict::Pass;
        let mut seen = None;
        if let Some((from, _)) = went_back {
            let mut event = StepEvent {
                holder: key.holder.clone(),
                counter: counter_name(&key.node).to_owned(),
                from,
                to: value,
                unix_time: at.unix_seconds,
                action: None,
            };
            counter.generation += 1;
            counter.current = value;
            if value <= counter.lowest.min(0) {
                let message = reset_message(&event, self.settings.on_model_reset);
                if fail {
                    self.resets_failed += 1;
                    event.action = Some("failed".into());
                    counter.failed = Some(message.clone());
                    verdict = Verdict::Fail(message.clone());
                } else {
                    self.resets_warned += 1;
                    event.action = Some("warned".into());
                }
                self.last_reset = Some(event.clone());
                seen = Some(Seen::Reset(event, message));
            } else {
                self.rewinds += 1;
                self.last_rewind = Some(event.clone());
                seen = Some(Seen::Rewind(event));
            }
        } else if value > counter.current {
            counter.current = value;
            self.advanced = Some(at);
            self.stall_warned = false;
        }
        self.last_read = Some(at.instant);
        // Past the point of the rebuild: the job recovered.
        if self.rebuilt.is_some_and(|(_, before)| value > before) {
            self.rebuilt = None;
        }
        self.highest = Some(self.highest.map_or(value, |h| h.max(value)));
        counter.lowest = counter.lowest.min(value);
        counter.highest = counter.highest.max(value);
        self.step = Some(counter.current);
        let generation = counter.generation;
        let requester =
            self.requesters
                .get_or_insert_with(&(key, read.requester.to_owned()), || Requester {
                    last: value,
                    generation,
                });
        requester.last = value;
        requester.generation = generation;
        (verdict, seen)
    }
}

/// The counter's name: the node's first path component (`global_step`).
fn counter_name(node: &str) -> &str {
    node.split('/').next().unwrap_or(node)
}

/// `/job:ps/task:0` for `/job:ps/replica:0/task:0` (between-graph training
/// has one replica); other names as they are.
fn short_task(task: &str) -> String {
    match TaskName::of_device(task) {
        Some(name) if name.replica == 0 => format!("/job:{}/task:{}", name.job, name.task),
        _ => task.to_owned(),
    }
}

/// What a reset is called, in the log and in the error TensorFlow gets.
fn reset_message(event: &StepEvent, action: OnModelReset) -> String {
    let what = format!(
        "tlcd: TensorFlow re-initialised the model mid-run: {} on {} went back from {} to {} \
         (a session was rebuilt after a broken connection and there is no checkpoint to restore).",
        event.counter,
        short_task(&event.holder),
        event.from,
        event.to
    );
    match action {
        OnModelReset::Fail => format!(
            "{what} tlcd fails the job rather than let it train again from scratch silently; \
             set recovery.on_model_reset = \"warn\" to let it continue."
        ),
        OnModelReset::Warn => format!(
            "{what} The job goes on, training again from scratch, because \
             recovery.on_model_reset = \"warn\"; set it to \"fail\" to stop such a job."
        ),
    }
}
