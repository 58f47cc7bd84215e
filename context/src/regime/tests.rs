//! Tests of [`super`]: the detector alone, and in a push context.

use super::*;

const REGIMES: Regimes = Regimes {
    critical_lag: 0.5,
    window: 4,
    change: 0.5,
    backlog: 4.0,
    rise: f64::INFINITY,
    agreement: f64::INFINITY,
};

/// Feeds `norms` (L2 of each gradient) with an error buffer of
/// `error` each, returning each push's regime.
fn run(detector: &mut RegimeDetector, norms: &[f64], error: f64) -> Vec<bool> {
    norms
        .iter()
        .map(|g| detector.observe(&REGIMES, g * g, error * error))
        .collect()
}

#[test]
fn a_new_stream_is_critical_for_its_first_two_windows() {
    let mut d = RegimeDetector::default();
    // The first window has nothing to compare with, the second is
    // decided by the first comparison.
    let regimes = run(&mut d, &[1.0; 12], 0.5);
    assert_eq!(regimes[..4], [true; 4]);
    assert_eq!(regimes[4..8], [true; 4]);
    assert_eq!(regimes[8..], [false; 4]);
    assert_eq!(d.critical_pushes(), 8);
}

#[test]
fn a_steady_norm_that_varies_within_a_window_stays_calm() {
    let mut d = RegimeDetector::default();
    run(&mut d, &[1.0; 8], 0.5);
    // Batch-to-batch swings of 10x, the same RMS per window.
    let noisy = [0.1, 1.9, 0.3, 1.4].repeat(5);
    assert!(run(&mut d, &noisy, 0.5).iter().all(|c| !c));
}

#[test]
fn a_fast_change_either_way_makes_the_next_window_critical() {
    for factor in [0.3, 3.0] {
        let mut d = RegimeDetector::default();
        run(&mut d, &[1.0; 8], 0.5);
        let regimes = run(&mut d, &[factor; 4], 0.5);
        assert!(regimes.iter().all(|c| !c), "decided at the window's end");
        assert_eq!(run(&mut d, &[factor; 4], 0.5), [true; 4]);
        // Steady again: calm from the window after.
        assert_eq!(run(&mut d, &[factor; 4], 0.5), [false; 4]);
    }
}

#[test]
fn a_slow_decay_stays_calm() {
    let mut d = RegimeDetector::default();
    // 10% per window: a learning rate's slow decay, not a regime.
    let norms: Vec<f64> = (0..40).map(|i| 0.9f64.powi(i / 4)).collect();
    let regimes = run(&mut d, &norms, 0.5);
    assert!(regimes[8..].iter().all(|c| !c));
}

#[test]
fn a_backlog_makes_the_next_window_critical() {
    let mut d = RegimeDetector::default();
    run(&mut d, &[1.0; 8], 0.5);
    run(&mut d, &[1.0; 4], 5.0);
    assert_eq!(run(&mut d, &[1.0; 4], 0.5), [true; 4]);
    assert_eq!(run(&mut d, &[1.0; 4], 0.5), [false; 4]);
}

#[test]
fn zero_and_non_finite_gradients_do_not_poison_the_state() {
    let mut d = RegimeDetector::default();
    run(&mut d, &[0.0; 8], 0.0);
    assert!(!d.critical(), "zero after zero is steady");
    run(&mut d, &[f64::NAN, 0.0, 0.0, 0.0], 0.0);
    assert!(!d.critical());
    run(&mut d, &[1.0; 4], 0.0);
    assert!(d.critical(), "from nothing to something is a change");
}

#[test]
fn a_push_context_refines_while_critical_and_not_once_calm() {
    use crate::push::{l2, PushContext};
    use crate::refine::{PassScale, Refinement};
    use tlc_codec::{Codec, Feedback, Sparsity};
    let three_lc = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    // Calm: 3LC's single pass. Critical: the buffer within half the
    // recent peak.
    let refine = Refinement {
        target: f64::INFINITY,
        max_passes: 8,
        scale: PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: 20.0,
        // The change rule alone: the calm single pass lets the
        // buffer grow.
        regimes: Regimes {
            backlog: f64::INFINITY,
            ..REGIMES
        },
    };
    let mut ctx = PushContext::new(three_lc, Feedback::On);
    let mut frames = Vec::new();
    for t in 0..16usize {
        // Steady and heavy-tailed: two values in 2000 set 3LC's M, the
        // bulk (most of the norm) waits after one pass.
        let g: Vec<f32> = (0..2000usize)
            .map(|i| {
                let bulk = ((i * 7919 + t * 104_729) % 1000) as f32 / 1000.0 - 0.5;
                if i % 1000 == t % 1000 {
                    bulk.signum()
                } else {
                    bulk * 0.2
                }
            })
            .collect();
        let mut wire = Vec::new();
        let encoded = ctx.encode(&g, three_lc, refine, 1, &mut wire).unwrap();
        let peak = ctx.counters().peak_l2;
        if t < 8 && encoded.frames < refine.max_passes {
            assert!(l2(ctx.residual()) <= 0.5 * peak * (1.0 + 1e-9), "push {t}");
        }
        frames.push(encoded.frames);
    }
    assert!(frames[..8].iter().all(|&f| f > 1), "{frames:?}");
    assert!(frames[8..].iter().all(|&f| f == 1), "{frames:?}");
    let counters = ctx.counters();
    assert_eq!(counters.critical, Some(false));
    assert_eq!(counters.critical_pushes, 8);
    // Calm pushes still move the peak the critical bound is against.
    let large = vec![3.0f32; 2000];
    ctx.encode(&large, three_lc, refine, 1, &mut Vec::new())
        .unwrap();
    let peak = ctx.counters().peak_l2;
    assert!((peak - l2(&large)).abs() <= 1e-6 * peak, "{peak}");
    // Without the controller the counters say nothing about regimes.
    let mut plain = PushContext::new(three_lc, Feedback::On);
    let off = Refinement {
        regimes: Regimes::OFF,
        ..refine
    };
    plain
        .encode(&[1.0; 8], three_lc, off, 1, &mut Vec::new())
        .unwrap();
    assert_eq!(plain.counters().critical, None);
}

#[test]
fn off_never_tightens() {
    assert!(!Regimes::OFF.is_on());
    assert_eq!(Regimes::OFF.lag(1.0, true), 1.0);
    assert_eq!(REGIMES.lag(1.0, true), 0.5);
    assert_eq!(REGIMES.lag(1.0, false), 1.0);
    assert_eq!(REGIMES.lag(0.25, true), 0.25);
}

#[test]
fn agreement_at_the_threshold_or_unheard_is_critical_and_below_is_calm() {
    let regimes = Regimes {
        agreement: 0.1,
        ..REGIMES
    };
    let mut d = RegimeDetector::default();
    // Past the first two windows, the window rules are calm.
    for _ in 0..8 {
        d.observe(&regimes, 1.0, 0.25);
    }
    for (heard, critical) in [
        (None, true),
        (Some(0.1), true),
        (Some(0.5), true),
        (Some(0.09), false),
        (Some(-0.3), false),
    ] {
        d.hear(heard);
        assert_eq!(d.critical_under(&regimes), critical, "{heard:?}");
        assert_eq!(d.observe(&regimes, 1.0, 0.25), critical, "{heard:?}");
    }
    // Not asked for: what is heard changes nothing.
    d.hear(Some(0.9));
    assert!(!d.critical_under(&REGIMES));
    assert!(!REGIMES.asks_agreement());
    assert!(regimes.asks_agreement());
}

#[test]
fn a_norm_that_climbs_slowly_makes_the_next_window_critical() {
    let regimes = Regimes {
        change: f64::INFINITY,
        rise: 0.5,
        ..REGIMES
    };
    let run = |d: &mut RegimeDetector, norms: &[f64]| -> Vec<bool> {
        norms
            .iter()
            .map(|g| d.observe(&regimes, g * g, 0.0))
            .collect()
    };
    // 20% per window never trips a change of half, but over three
    // windows it is 1.73x: the window after is critical.
    let mut d = RegimeDetector::default();
    let climbing: Vec<f64> = (0..28).map(|i| 1.2f64.powi(i / 4)).collect();
    let regimes_seen = run(&mut d, &climbing);
    assert!(regimes_seen[8..12].iter().all(|c| !c), "{regimes_seen:?}");
    assert!(regimes_seen[20..].iter().all(|c| *c), "{regimes_seen:?}");
    // Falling or flat with noise stays calm.
    let mut d = RegimeDetector::default();
    let falling: Vec<f64> = (0..40).map(|i| 0.8f64.powi(i / 4)).collect();
    assert!(run(&mut d, &falling)[8..].iter().all(|c| !c));
    let mut d = RegimeDetector::default();
    let noisy = [1.0, 1.3, 0.8, 1.1].repeat(10);
    assert!(run(&mut d, &noisy)[8..].iter().all(|c| !c));
}
