//! The link decision's state machine: break-even, groups, probes and
//! settling calls.

use super::*;
use crate::policy::{LinkMode, LinkSettings};

/// `[policy.link] mode = "auto"` with its default margin.
fn auto() -> Link {
    Link {
        mode: LinkMode::Auto,
        ..Link::default()
    }
}

fn key(direction: Direction) -> PayoffKey {
    PayoffKey {
        tensor: TensorKey::new(
            "/job:ps/replica:0/task:0",
            "/job:worker/replica:0/task:0",
            "w",
        ),
        source: "connection 1".into(),
        direction,
    }
}

fn at(rate: f64) -> LinkNow {
    LinkNow {
        rate: Some(rate),
        decode_ps_per_byte: Some(500.0),
    }
}

/// 1 MB encoded in 0.5 ms (500 ps/B) to 1/32 of it: with a 500 ps/B
/// decode, break-even is 0.97 / 1e-9 = 969 MB/s.
fn learned(payoffs: &Payoffs, key: &PayoffKey) {
    payoffs.record(key, 1 << 20, 1 << 15, Duration::from_nanos(524_288));
}

/// Asks for a verdict and does what the holder does with it: a
/// compressed call is recorded, a settling one settled.
fn call(payoffs: &Payoffs, key: &PayoffKey, link: LinkNow, now: Instant) -> Verdict {
    let verdict = payoffs.verdict(key, link, &auto(), now);
    match verdict {
        Verdict::Compress | Verdict::Probe => learned(payoffs, key),
        Verdict::Settle => payoffs.settled(key),
        Verdict::Pass | Verdict::Explore => {}
    }
    verdict
}

/// Where `verdict` is in `verdicts`.
fn positions(verdicts: &[Verdict], verdict: Verdict) -> Vec<usize> {
    (0..verdicts.len())
        .filter(|&i| verdicts[i] == verdict)
        .collect()
}

fn calls(payoffs: &Payoffs, key: &PayoffKey, rate: f64, n: u32) -> Vec<Verdict> {
    let now = Instant::now();
    (0..n).map(|_| call(payoffs, key, at(rate), now)).collect()
}

/// A connection that names another requester's task, with a link it
/// made up, moves only its own decision: the other's stays where its own
/// reports put it (here, between break-even and the margin, where the
/// group's last state decides).
#[test]
fn one_source_cannot_move_another_requesters_decision() {
    let payoffs = Payoffs::default();
    let victim = key(Direction::Pull);
    let hostile = PayoffKey {
        source: "connection 2".into(),
        ..victim.clone()
    };
    let now = Instant::now();
    for key in [&victim, &hostile] {
        assert_eq!(call(&payoffs, key, at(1.25e6), now), Verdict::Compress);
        assert_eq!(call(&payoffs, key, at(1.25e6), now), Verdict::Compress);
    }
    assert_eq!(call(&payoffs, &hostile, at(1e15), now), Verdict::Pass);
    // 2x break-even: passing only if the group already was.
    assert_eq!(calls(&payoffs, &victim, 2e9, 3), [Verdict::Compress; 3]);
    assert_eq!(payoffs.switches(), (1, 0), "only the hostile one switched");
}

#[test]
fn passes_above_margin_times_break_even_and_returns_below_it() {
    let payoffs = Payoffs::default();
    let pull = key(Direction::Pull);
    let now = Instant::now();
    assert_eq!(
        call(&payoffs, &pull, at(1e12), now),
        Verdict::Compress,
        "costs unknown"
    );
    // 10 Mbit/s: compress.
    assert_eq!(calls(&payoffs, &pull, 1.25e6, 1), [Verdict::Compress]);
    // 2x break-even: inside the margin, still compressing.
    assert_eq!(calls(&payoffs, &pull, 2e9, 1), [Verdict::Compress]);
    // 4x: pass, and stay passing down to break-even.
    assert_eq!(calls(&payoffs, &pull, 4e9, 1), [Verdict::Pass]);
    assert_eq!(calls(&payoffs, &pull, 1e9, 1), [Verdict::Pass]);
    assert_eq!(payoffs.switches(), (1, 0));
    let (_, view) = payoffs.views().pop().unwrap();
    assert!(
        view.passing && (view.break_even - 0.969e9).abs() < 0.01e9,
        "{view:?}"
    );
    // Below break-even: compressed again, once the replica the raw
    // answers left behind is settled.
    assert_eq!(
        calls(&payoffs, &pull, 0.9e9, 3),
        [Verdict::Settle, Verdict::Compress, Verdict::Compress]
    );
    assert_eq!(payoffs.switches(), (1, 1));
    assert_eq!(payoffs.settles(), 1);
}

#[test]
fn a_passing_pull_settles_its_replica_before_each_probe() {
    let payoffs = Payoffs::default();
    let pull = key(Direction::Pull);
    learned(&payoffs, &pull);
    let verdicts = calls(&payoffs, &pull, 1e11, PROBE_EVERY * 2 + 3);
    let at = |v| positions(&verdicts, v);
    // The 64th call would be a probe: it settles, and probes next.
    let first = PROBE_EVERY as usize - 1;
    assert_eq!(at(Verdict::Settle), [first, 2 * first + 2]);
    assert_eq!(at(Verdict::Probe), [first + 1, 2 * first + 3]);
    assert_eq!(verdicts[0], Verdict::Pass);
}

#[test]
fn a_passing_push_carries_the_error_a_lossy_call_left_on_the_next_call() {
    let payoffs = Payoffs::default();
    let push = key(Direction::Push);
    learned(&payoffs, &push);
    let verdicts = calls(&payoffs, &push, 1e11, PROBE_EVERY * 2 + 2);
    let at = |v| positions(&verdicts, v);
    // The call that would have been the first raw one, and each call
    // after a probe.
    let probe = PROBE_EVERY as usize - 1;
    assert_eq!(at(Verdict::Probe), [probe, 2 * probe + 1]);
    assert_eq!(at(Verdict::Settle), [0, probe + 1, 2 * probe + 2]);
    // Nothing owed after a settle: raw until the next probe.
    assert!(verdicts[1..probe].iter().all(|v| *v == Verdict::Pass));
}

#[test]
fn a_requesters_tensors_cross_raw_together_or_not_at_all() {
    let payoffs = Payoffs::default();
    let large = key(Direction::Push);
    let large_key = large.tensor.clone();
    let small = PayoffKey {
        tensor: TensorKey {
            tensor: "bias".into(),
            ..large_key
        },
        ..key(Direction::Push)
    };
    // 1 MB at break-even 969 MB/s; 4 KiB encoded in 20 µs, so at
    // 0.97 / 5.4 ns = 180 MB/s alone. Together, by bytes: 953 MB/s.
    learned(&payoffs, &large);
    payoffs.record(&small, 4 << 10, 128, Duration::from_micros(20));
    let now = Instant::now();
    // 700 MB/s: above three times the small tensor's break-even,
    // below the large one's: both compressed, not the small one raw.
    for tensor in [&small, &large] {
        assert_eq!(
            payoffs.verdict(tensor, at(700e6), &auto(), now),
            Verdict::Compress
        );
    }
    // Above three times the group's break-even: both raw (once the
    // push that each owes is settled).
    for tensor in [&small, &large] {
        assert_eq!(
            call(&payoffs, tensor, at(4e9), now),
            Verdict::Settle,
            "{tensor:?}"
        );
        assert_eq!(call(&payoffs, tensor, at(4e9), now), Verdict::Pass);
    }
    assert_eq!(payoffs.switches(), (1, 0));
    // Another requester's tensors are a group of their own: this one
    // passes at 700 MB/s (settling its push first).
    let other = PayoffKey {
        tensor: TensorKey {
            requester: "/job:worker/replica:0/task:1".into(),
            ..small.tensor.clone()
        },
        ..small.clone()
    };
    payoffs.record(&other, 4 << 10, 128, Duration::from_micros(20));
    assert_eq!(call(&payoffs, &other, at(700e6), now), Verdict::Settle);
    assert_eq!(call(&payoffs, &other, at(700e6), now), Verdict::Pass);
    let views = payoffs.views();
    let (_, view) = views.iter().find(|(k, _)| *k == large).unwrap();
    assert!((view.break_even - 0.953e9).abs() < 0.005e9, "{view:?}");
}

/// `auto` taking every link to run at `mbit` Mbit/s.
fn assuming(mbit: u64) -> Link {
    Link::new(&LinkSettings {
        mode: LinkMode::Auto,
        assume_rate_mbit: mbit,
        ..LinkSettings::default()
    })
    .unwrap()
}

#[test]
fn always_and_an_assumed_rate_override_the_measurement() {
    let payoffs = Payoffs::default();
    let pull = key(Direction::Pull);
    learned(&payoffs, &pull);
    let now = Instant::now();
    let always = Link::default();
    assert_eq!(
        payoffs.verdict(&pull, at(1e12), &always, now),
        Verdict::Compress
    );
    let slow = assuming(100);
    assert_eq!(
        payoffs.verdict(&pull, at(1e12), &slow, now),
        Verdict::Compress
    );
    let fast = assuming(100_000);
    assert_eq!(
        payoffs.verdict(&pull, LinkNow::default(), &fast, now),
        Verdict::Pass
    );
}

#[test]
fn without_a_rate_a_mid_sized_tensor_explores_every_two_seconds() {
    let payoffs = Payoffs::default();
    let pull = key(Direction::Pull);
    let now = Instant::now();
    let unknown = LinkNow::default();
    // 16 MiB: too large to explore with.
    payoffs.record(&pull, 16 << 20, 1 << 20, Duration::from_millis(8));
    assert_eq!(call(&payoffs, &pull, unknown, now), Verdict::Compress);
    // 32 KiB: too small to time.
    payoffs.record(&pull, 32 << 10, 1 << 10, Duration::from_micros(20));
    assert_eq!(call(&payoffs, &pull, unknown, now), Verdict::Compress);
    payoffs.record(&pull, 128 << 10, 4 << 10, Duration::from_micros(60));
    assert_eq!(call(&payoffs, &pull, unknown, now), Verdict::Explore);
    // The replica the raw answer left behind is settled first.
    assert_eq!(call(&payoffs, &pull, unknown, now), Verdict::Settle);
    assert_eq!(call(&payoffs, &pull, unknown, now), Verdict::Compress);
    payoffs.record(&pull, 128 << 10, 4 << 10, Duration::from_micros(60));
    let later = now + EXPLORE_EVERY;
    assert_eq!(call(&payoffs, &pull, unknown, later), Verdict::Explore);
}

#[test]
fn a_codec_that_saves_nothing_never_pays() {
    let payoffs = Payoffs::default();
    let pull = key(Direction::Pull);
    payoffs.record(&pull, 1 << 20, 1 << 20, Duration::from_micros(100));
    assert_eq!(
        payoffs.verdict(&pull, at(1e3), &auto(), Instant::now()),
        Verdict::Pass
    );
}
