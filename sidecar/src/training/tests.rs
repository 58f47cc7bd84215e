//! The step watch's rule, read by read.

use std::time::{Duration, Instant};

use super::watch::{Moment, StepRead, StepWatch, Verdict};
use crate::training::recovery::{OnModelReset, RecoverySettings};

const PS: &str = "/job:ps/replica:0/task:0";
const W0: &str = "/job:worker/replica:0/task:0";
const W1: &str = "/job:worker/replica:0/task:1";
const NODE: &str = "global_step/read";

fn read<'a>(requester: &'a str, incarnation: u64) -> StepRead<'a> {
    StepRead {
        holder: PS,
        incarnation,
        requester,
        node: NODE,
    }
}

/// A clock that moves one second per read.
struct Clock {
    start: Instant,
    seconds: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: Instant::now(),
            seconds: 0,
        }
    }

    fn tick(&mut self) -> Moment {
        self.seconds += 1;
        Moment {
            instant: self.start + Duration::from_secs(self.seconds),
            unix_seconds: 1_790_000_000.0 + self.seconds as f64,
        }
    }
}

fn watch(action: OnModelReset) -> StepWatch {
    StepWatch::new(
        RecoverySettings {
            on_model_reset: action,
            stall_warn_seconds: 600,
            stall_fail_seconds: 300,
        },
        64,
    )
}

/// `requester` reads each of `values`; every verdict.
fn reads(
    watch: &StepWatch,
    clock: &mut Clock,
    requester: &str,
    values: impl IntoIterator<Item = i64>,
) -> Vec<Verdict> {
    values
        .into_iter()
        .map(|v| watch.observe(read(requester, 1), v, clock.tick()))
        .collect()
}

fn all_pass(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| *v == Verdict::Pass)
}

#[test]
fn monotonic_reads_are_progress() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    // Two workers read every step; a repeated value is no regression.
    for step in 0..100 {
        assert!(all_pass(&reads(&watch, &mut clock, W0, [step, step])));
        assert!(all_pass(&reads(&watch, &mut clock, W1, [step])));
    }
    let view = watch.view(Instant::now());
    assert_eq!(view.global_step, Some(99));
    assert_eq!((view.resets, view.rewinds), (0, 0));
    assert!(view.advanced_unix_time.is_some());
}

#[test]
fn back_to_the_start_is_a_reset_that_fails_every_reader() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    for step in 0..100 {
        reads(&watch, &mut clock, W0, [step]);
        reads(&watch, &mut clock, W1, [step]);
    }
    let verdict = watch.observe(read(W0, 1), 0, clock.tick());
    let Verdict::Fail(message) = verdict else {
        panic!("a reset passed: {verdict:?}");
    };
    assert_eq!(
        message,
        "tlcd: TensorFlow re-initialised the model mid-run: global_step on /job:ps/task:0 \
         went back from 99 to 0 (a session was rebuilt after a broken connection and there is \
         no checkpoint to restore). tlcd fails the job rather than let it train again from \
         scratch silently; set recovery.on_model_reset = \"warn\" to let it continue."
    );
    // Sticky: the other worker, and any later read, fails the same way.
    assert_eq!(
        watch.observe(read(W1, 1), 1, clock.tick()),
        Verdict::Fail(message.clone())
    );
    assert_eq!(
        watch.observe(read(W0, 1), 2, clock.tick()),
        Verdict::Fail(message)
    );
    let view = watch.view(Instant::now());
    assert_eq!((view.resets, view.resets_failed, view.rewinds), (1, 1, 0));
    let event = view.last_reset.unwrap();
    assert_eq!(
        (event.from, event.to, event.action.as_deref()),
        (99, 0, Some("failed"))
    );
    assert_eq!(event.holder, PS);
    assert_eq!(event.counter, "global_step");
}

#[test]
fn a_warned_reset_passes_and_counts_once() {
    let watch = watch(OnModelReset::Warn);
    let mut clock = Clock::new();
    for step in 0..100 {
        reads(&watch, &mut clock, W0, [step]);
        reads(&watch, &mut clock, W1, [step]);
    }
    // Both workers see the model go back: one event, not two.
    assert!(all_pass(&reads(&watch, &mut clock, W0, [0, 1])));
    assert!(all_pass(&reads(&watch, &mut clock, W1, [1, 2])));
    assert!(all_pass(&reads(&watch, &mut clock, W0, [2, 3])));
    let view = watch.view(Instant::now());
    assert_eq!((view.resets, view.resets_warned, view.rewinds), (1, 1, 0));
    assert_eq!(view.global_step, Some(3), "training again from the start");
    assert_eq!(view.last_reset.unwrap().action.as_deref(), Some("warned"));
    // Put to "fail" later, a second reset fails.
    watch.configure(RecoverySettings {
        on_model_reset: OnModelReset::Fail,
        stall_warn_seconds: 600,
        stall_fail_seconds: 300,
    });
    assert!(matches!(
        watch.observe(read(W0, 1), 0, clock.tick()),
        Verdict::Fail(_)
    ));
}

#[test]
fn back_to_a_point_after_the_start_is_a_rewind() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    assert!(all_pass(&reads(&watch, &mut clock, W0, 0..150)));
    // A checkpoint restore: 149 back to 50, while the lowest seen is 0.
    assert!(all_pass(&reads(&watch, &mut clock, W0, [50, 51, 52])));
    let view = watch.view(Instant::now());
    assert_eq!((view.resets, view.rewinds), (0, 1));
    let event = view.last_rewind.unwrap();
    assert_eq!(
        (event.from, event.to, event.action.as_deref()),
        (149, 50, None)
    );
    assert_eq!(view.global_step, Some(52));
    // Back to the lowest value ever seen after all: a reset.
    assert!(matches!(
        watch.observe(read(W0, 1), 0, clock.tick()),
        Verdict::Fail(_)
    ));
}

#[test]
fn a_sidecar_started_mid_run_takes_a_restore_for_a_rewind_and_zero_for_a_reset() {
    // Restarted at step 99: it never saw the start, so its lowest is 99.
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    assert!(all_pass(&reads(&watch, &mut clock, W0, 99..120)));
    // A checkpoint restore to 50 is below everything it saw, but not the
    // start: a rewind, never a failed job.
    assert!(all_pass(&reads(&watch, &mut clock, W0, [50, 51])));
    assert_eq!(watch.view(Instant::now()).rewinds, 1);
    // Back to 0: the start, whatever it saw before.
    assert!(matches!(
        watch.observe(read(W0, 1), 0, clock.tick()),
        Verdict::Fail(_)
    ));
}

#[test]
fn requesters_are_not_compared_with_each_other() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    assert!(all_pass(&reads(&watch, &mut clock, W0, [99, 100, 101])));
    // Worker 1 is a step behind worker 0: no event.
    assert!(all_pass(&reads(&watch, &mut clock, W1, [99, 100])));
    let view = watch.view(Instant::now());
    assert_eq!((view.resets, view.rewinds), (0, 0));
    assert_eq!(view.global_step, Some(101));
}

#[test]
fn a_new_holder_incarnation_starts_fresh() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    assert!(all_pass(&reads(&watch, &mut clock, W0, 0..100)));
    // A new ps process (or a new job): its counter starts at 0.
    for step in 0..5 {
        let verdict = watch.observe(read(W0, 2), step, clock.tick());
        assert_eq!(verdict, Verdict::Pass);
    }
    let view = watch.view(Instant::now());
    assert_eq!((view.resets, view.rewinds), (0, 0));
    assert_eq!(view.global_step, Some(4));
}

#[test]
fn the_tables_are_bounded() {
    let watch = StepWatch::new(RecoverySettings::default(), 16);
    let mut clock = Clock::new();
    for i in 0..1000u64 {
        let requester = format!("/job:worker/replica:0/task:{i}");
        let node = format!("global_step/n{i}/read");
        let read = StepRead {
            holder: PS,
            incarnation: i,
            requester: &requester,
            node: &node,
        };
        assert_eq!(watch.observe(read, 7, clock.tick()), Verdict::Pass);
    }
    assert_eq!(watch.entries(), (16, 16));
    // The watch still works for a real job after the flood.
    assert!(all_pass(&reads(&watch, &mut clock, W0, 0..100)));
    assert!(matches!(
        watch.observe(read(W0, 1), 0, clock.tick()),
        Verdict::Fail(_)
    ));
}

#[test]
fn a_stall_is_warned_once_and_only_after_progress() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    let start = clock.start;
    // Nothing read yet, or never advanced: no stall, whatever the time.
    assert!(!watch.check_stall(start + Duration::from_secs(10_000)));
    reads(&watch, &mut clock, W0, [5]);
    assert!(!watch.check_stall(start + Duration::from_secs(10_000)));
    assert_eq!(watch.view(start).seconds_since_advanced, None);
    reads(&watch, &mut clock, W0, [6]);
    let advanced = watch
        .view(start + Duration::from_secs(12))
        .seconds_since_advanced;
    assert_eq!(advanced, Some(10.0));
    assert!(!watch.check_stall(start + Duration::from_secs(601)));
    assert!(watch.check_stall(start + Duration::from_secs(602)));
    assert!(
        !watch.check_stall(start + Duration::from_secs(900)),
        "once per stall"
    );
    // Progress (at 3 s) re-arms it.
    reads(&watch, &mut clock, W0, [7]);
    assert!(!watch.check_stall(start + Duration::from_secs(602)));
    assert!(watch.check_stall(start + Duration::from_secs(603)));
    watch.configure(RecoverySettings {
        on_model_reset: OnModelReset::Fail,
        stall_warn_seconds: 0,
        stall_fail_seconds: 300,
    });
    reads(&watch, &mut clock, W0, [8]);
    assert!(
        !watch.check_stall(start + Duration::from_secs(100_000)),
        "0: off"
    );
}

#[test]
fn a_job_stuck_after_a_rebuilt_session_is_failed_once() {
    let watch = watch(OnModelReset::Fail);
    let mut clock = Clock::new();
    let secs = Duration::from_secs;
    // A session made before training advanced is the job starting.
    assert_eq!(watch.session_created(clock.start), None);
    assert!(all_pass(&reads(&watch, &mut clock, W0, 0..100)));
    assert_eq!(watch.stuck_after_rebuild(clock.start + secs(10_000)), None);

    // Rebuilt at step 99, and training goes past it: recovered.
    let at = clock.tick().instant;
    assert_eq!(watch.session_created(at), Some(99));
    assert!(all_pass(&reads(
        &watch,
        &mut clock,
        W0,
        [95, 96, 97, 98, 99, 100]
    )));
    assert_eq!(watch.stuck_after_rebuild(at + secs(10_000)), None);

    // Rebuilt at 100; a restore to 98 reads on, slowly but reading: not
    // stuck. Then no read for stall_fail_seconds (300): stuck.
    let at = clock.tick().instant;
    assert_eq!(watch.session_created(at), Some(100));
    assert!(all_pass(&reads(&watch, &mut clock, W0, [98])));
    let last = clock.tick().instant;
    assert!(all_pass(&[watch.observe(
        read(W0, 1),
        99,
        Moment {
            instant: last,
            unix_seconds: 0.0
        }
    )]));
    assert_eq!(watch.stuck_after_rebuild(last + secs(299)), None);
    let message = watch.stuck_after_rebuild(last + secs(300)).expect("stuck");
    assert!(
        message.contains("300 s") && message.contains("global step 99"),
        "{message}"
    );
    assert_eq!(watch.stalls_failed(), 1);
    // Once per rebuild.
    assert_eq!(watch.stuck_after_rebuild(last + secs(900)), None);
}

#[test]
fn stall_fail_seconds_zero_never_fails() {
    let watch = watch(OnModelReset::Fail);
    watch.configure(RecoverySettings {
        stall_fail_seconds: 0,
        ..RecoverySettings::default()
    });
    let mut clock = Clock::new();
    assert!(all_pass(&reads(&watch, &mut clock, W0, 0..10)));
    let rebuilt = Instant::now();
    watch.session_created(rebuilt);
    assert_eq!(
        watch.stuck_after_rebuild(rebuilt + Duration::from_secs(1_000_000)),
        None
    );
}
