//! Tests of [`super`]: the `refine` module's bounds.

use super::*;

/// `‖error‖₂ / ‖reference‖₂`.
fn relative_l2(error: impl Iterator<Item = f32>, reference: &[f32]) -> f64 {
    relative_to(
        sum_of_squares(error),
        sum_of_squares(reference.iter().copied()),
    )
}
use crate::pull::{drift, PullSource, Replica, Served};
use crate::push::{decode_push, l2, PushContext};
use std::num::NonZeroU64;
use tlc_codec::{Codec, Feedback, Limits, Sparsity};
use tlc_wire::envelope::Envelope;

const THREE_LC: Codec = Codec::ThreeLc {
    sparsity: Sparsity::ONE,
};

/// Passes toward `target` (the error relative to the gradient), at most
/// `max_passes`, each scaled by `scale`; no bound from the peak.
fn toward(target: f64, max_passes: u32, scale: PassScale) -> Refinement {
    Refinement {
        target,
        max_passes,
        scale,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: Regimes::OFF,
    }
}

/// Passes against the recent peak only: the error held to `peak_lag`
/// times a peak that halves every `peak_half_life` gradients, 8 passes
/// at most.
fn against_the_peak(peak_lag: f64, peak_half_life: f64) -> Refinement {
    Refinement {
        peak_lag,
        peak_half_life,
        ..toward(f64::INFINITY, 8, PassScale::Max)
    }
}

/// A step of training as 3LC finds it hard: one value in a thousand
/// sets `M`, the bulk (most of the L2 norm) is 10x smaller, below
/// `M / 2`, and waits.
fn heavy_tailed(n: usize, t: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let bulk = ((i * 7919 + t * 104_729) % 1000) as f32 / 1000.0 - 0.5;
            if i % 997 == t % 997 {
                bulk.signum() * 0.05
            } else {
                bulk * 0.01
            }
        })
        .collect()
}

#[test]
fn a_refined_pull_update_lands_within_its_target_in_one_chain() {
    let refine = toward(0.02, 6, PassScale::Toward);
    let mut unrefined_drifted = 0;
    for (r, expect_passes) in [(Refinement::OFF, false), (refine, true)] {
        let mut source = PullSource::new(NonZeroU64::new(9).unwrap(), 1);
        let mut replica = Replica::new();
        let mut value: Vec<f32> = (0..2000).map(|i| ((i % 13) as f32 - 6.0) * 0.02).collect();
        let mut wire = Vec::new();
        source
            .serve(&value, None, THREE_LC, r, 0, &mut wire)
            .unwrap();
        replica.apply(&wire, &Limits::default()).unwrap();
        let mut worst = 0f64;
        for t in 0..20 {
            let step = heavy_tailed(value.len(), t);
            for (v, d) in value.iter_mut().zip(step) {
                *v += d;
            }
            let before = replica.state().unwrap().version;
            wire.clear();
            let served = source
                .serve(&value, replica.state(), THREE_LC, r, 0, &mut wire)
                .unwrap();
            // A cache of one update still reaches back one update,
            // however many passes it took.
            let Served::Chain(frames) = served.served else {
                panic!("step {t}: {:?}", served.served);
            };
            assert_eq!(u64::from(frames), served.state.version - before);
            if !expect_passes {
                assert_eq!(frames, 1);
            }
            assert!(frames <= r.max_passes);
            replica.apply(&wire, &Limits::default()).unwrap();
            assert_eq!(replica.replica_hash(), Some(source.replica_hash()));
            let d = drift(&value, replica.values().unwrap());
            if frames < r.max_passes {
                assert!(d <= r.target, "step {t}: drift {d} after {frames} passes");
            }
            worst = worst.max(d);
        }
        if expect_passes {
            assert!(source.counters().refinements > 0);
            assert!(worst <= 0.02, "worst drift {worst}");
        } else {
            assert_eq!(source.counters().refinements, 0);
            // Without refinement the bulk of each step waits: the
            // case refinement exists for.
            unrefined_drifted += usize::from(worst > 0.02);
        }
    }
    assert_eq!(
        unrefined_drifted, 1,
        "the unrefined replica should drift past 2%"
    );
}

#[test]
fn a_refined_push_sends_the_gradient_and_its_error_in_one_envelope() {
    let limits = Limits::default();
    let refine = toward(0.5, 8, PassScale::Max);
    let mut off = PushContext::new(THREE_LC, Feedback::On);
    let mut on = PushContext::new(THREE_LC, Feedback::On);
    let (mut sent_off, mut sent_on) = (vec![0f64; 3000], vec![0f64; 3000]);
    let mut total = vec![0f64; 3000];
    let mut decoded = Vec::new();
    for t in 0..10 {
        let g = heavy_tailed(3000, t);
        for (acc, v) in total.iter_mut().zip(&g) {
            *acc += f64::from(*v);
        }
        for (ctx, r, sent) in [
            (&mut off, Refinement::OFF, &mut sent_off),
            (&mut on, refine, &mut sent_on),
        ] {
            let mut wire = Vec::new();
            let encoded = ctx.encode(&g, THREE_LC, r, 7, &mut wire).unwrap();
            let envelope = Envelope::parse(&wire, &limits).unwrap();
            assert_eq!(envelope.frames().len() as u32, encoded.frames);
            assert!(encoded.frames <= r.max_passes);
            let decoded_meta = decode_push(&wire, &limits, &mut decoded).unwrap();
            assert_eq!(decoded_meta.fallback_token, 7);
            for (s, v) in sent.iter_mut().zip(&decoded) {
                *s += f64::from(*v);
            }
            let error = relative_l2(ctx.residual().iter().copied(), &g);
            if encoded.frames < r.max_passes && r.max_passes > 1 {
                assert!(error <= r.target, "step {t}: error {error}");
            }
        }
    }
    assert_eq!(off.counters().refinements, 0);
    assert!(on.counters().refinements > 0);
    // Error feedback holds either way: what was sent plus what waits
    // is what was given (up to f32 rounding).
    for (ctx, sent) in [(&off, &sent_off), (&on, &sent_on)] {
        for ((s, e), want) in sent.iter().zip(ctx.residual()).zip(&total) {
            assert!(
                (s + f64::from(*e) - want).abs() < 1e-4,
                "{s} + {e} != {want}"
            );
        }
    }
    // ... and what waits is far less with refinement (refinements stop
    // near the 0.5 target, so not by more than about 3x here).
    let waiting = |ctx: &PushContext| {
        relative_l2(
            ctx.residual().iter().copied(),
            &total.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        )
    };
    assert!(
        waiting(&on) * 2.0 < waiting(&off),
        "{} vs {}",
        waiting(&on),
        waiting(&off)
    );
}

#[test]
fn push_frames_toward_the_target_meet_the_bound() {
    // A gradient whose bulk is small beside a few large elements, the
    // same every step (a plateau), under `‖e‖ ≤ ‖g‖`: frames toward
    // the target meet it after every push, as frames at 3LC's scale
    // do, each pass picking its own scale.
    let limits = Limits::default();
    let g: Vec<f32> = (0..20_000)
        .map(|i| {
            if i % 2000 == 0 {
                1.0
            } else {
                0.002 * (((i * 37) % 11) as f32 - 5.0)
            }
        })
        .collect();
    let norm = l2(&g);
    for scale in [PassScale::Max, PassScale::Toward] {
        let refine = toward(1.0, 8, scale);
        let mut ctx = PushContext::new(THREE_LC, Feedback::On);
        let mut decoded = Vec::new();
        let mut sum = vec![0f64; g.len()];
        for _ in 0..40 {
            let mut wire = Vec::new();
            let encoded = ctx.encode(&g, THREE_LC, refine, 7, &mut wire).unwrap();
            decode_push(&wire, &limits, &mut decoded).unwrap();
            for (s, d) in sum.iter_mut().zip(&decoded) {
                *s += f64::from(*d);
            }
            if encoded.frames < refine.max_passes {
                let lag = l2(ctx.residual()) / norm;
                assert!(lag <= 1.0 + 1e-6, "{scale:?}: lag {lag}");
            }
        }
        // What arrived plus what waits is what was pushed.
        for (i, (s, e)) in sum.iter().zip(ctx.residual()).enumerate() {
            let pushed = 40.0 * f64::from(g[i]);
            assert!((s + f64::from(*e) - pushed).abs() <= 1e-3 * (1.0 + pushed.abs()));
        }
    }
}

#[test]
fn a_peak_that_forgets_keeps_the_lag_to_recent_gradients() {
    // The same shrinking gradients as below, with a peak that halves
    // every 2 gradients: the bound follows them down and refines late
    // gradients too, where the largest-ever peak lets them go alone.
    let limits = Limits::default();
    let forgetting = against_the_peak(0.5, 2.0);
    let mut ctx = PushContext::new(THREE_LC, Feedback::On);
    let mut decoded = Vec::new();
    let mut peak_squares = 0f64;
    let mut late_frames = 0;
    for t in 0..12 {
        let scale = 0.5f32.powf(t as f32 / 2.0);
        let g: Vec<f32> = heavy_tailed(3000, t).iter().map(|v| v * scale).collect();
        peak_squares = (peak_squares * 0.5).max(l2(&g) * l2(&g));
        let mut wire = Vec::new();
        let encoded = ctx.encode(&g, THREE_LC, forgetting, 7, &mut wire).unwrap();
        decode_push(&wire, &limits, &mut decoded).unwrap();
        let lag = l2(ctx.residual()) / peak_squares.sqrt();
        if encoded.frames < forgetting.max_passes {
            assert!(
                lag <= 0.5 * (1.0 + 1e-9),
                "step {t}: lag {lag} of the recent peak"
            );
        }
        if t >= 8 {
            late_frames += encoded.frames;
        }
    }
    let peak = ctx.counters().peak_l2;
    assert!((peak - peak_squares.sqrt()).abs() <= 1e-6 * peak, "{peak}");
    assert!(
        late_frames > 4,
        "late gradients refined: {late_frames} frames in 4 steps"
    );
    // A change that is not finite leaves the peak as it was.
    assert_eq!(forgetting.next_peak(4.0, f64::NAN), 4.0);
    assert_eq!(forgetting.next_peak(4.0, 1.0), 2.0);
    assert_eq!(Refinement::OFF.next_peak(4.0, 1.0), 4.0);
}

#[test]
fn a_peak_lag_refines_early_gradients_and_lets_decayed_ones_go_alone() {
    let limits = Limits::default();
    // No bound against the gradient itself: only the peak's.
    let refine = against_the_peak(0.5, f64::INFINITY);
    let mut ctx = PushContext::new(THREE_LC, Feedback::On);
    let mut frames_by_step = Vec::new();
    let mut decoded = Vec::new();
    let mut peak = 0f64;
    for t in 0..12 {
        // Gradients that shrink by half every two steps, as a loss
        // falling early in training makes them.
        let scale = 0.5f32.powf(t as f32 / 2.0);
        let g: Vec<f32> = heavy_tailed(3000, t).iter().map(|v| v * scale).collect();
        peak = peak.max(l2(&g));
        let mut wire = Vec::new();
        let encoded = ctx.encode(&g, THREE_LC, refine, 7, &mut wire).unwrap();
        decode_push(&wire, &limits, &mut decoded).unwrap();
        let lag = l2(ctx.residual()) / peak;
        if encoded.frames < refine.max_passes {
            assert!(lag <= 0.5, "step {t}: lag {lag} of the peak");
        }
        frames_by_step.push(encoded.frames);
    }
    assert!((ctx.counters().peak_l2 - peak).abs() <= 1e-9 * peak);
    assert!(frames_by_step[0] > 1, "{frames_by_step:?}");
    assert_eq!(
        frames_by_step[8..],
        [1, 1, 1, 1],
        "decayed gradients go in one pass: {frames_by_step:?}"
    );
    // Without the bound, the same context would never refine.
    let mut unbounded = PushContext::new(THREE_LC, Feedback::On);
    let g = heavy_tailed(3000, 0);
    let unbounded_refine = Refinement {
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: Regimes::OFF,
        ..refine
    };
    let encoded = unbounded
        .encode(&g, THREE_LC, unbounded_refine, 7, &mut Vec::new())
        .unwrap();
    assert_eq!(encoded.frames, 1);
    assert_eq!(unbounded.counters().peak_l2, 0.0);
}

#[test]
fn a_pull_peak_lag_refines_early_updates_and_lets_decayed_ones_go_alone() {
    let refine = against_the_peak(0.5, f64::INFINITY);
    let mut source = PullSource::new(NonZeroU64::new(3).unwrap(), 8);
    let mut replica = Replica::new();
    let mut value = vec![1.0f32; 3000];
    let mut peak = 0f64;
    let mut refined_by_step = Vec::new();
    for t in 0..14 {
        // Updates that halve every two steps.
        let scale = 0.5f32.powf(t as f32 / 2.0);
        let before: Vec<f32> = source.replica().to_vec();
        for (v, g) in value.iter_mut().zip(heavy_tailed(3000, t)) {
            *v -= g * scale;
        }
        if t > 0 {
            let update = relative_l2(value.iter().zip(&before).map(|(v, r)| v - r), &[1.0]);
            peak = peak.max(update);
        }
        let refinements = source.counters().refinements;
        let mut wire = Vec::new();
        source
            .serve(&value, replica.state(), THREE_LC, refine, 0, &mut wire)
            .unwrap();
        replica.apply(&wire, &Limits::default()).unwrap();
        let off = relative_l2(
            value.iter().zip(source.replica()).map(|(v, r)| v - r),
            &[1.0],
        );
        if t > 0 {
            assert!(
                off <= 0.5 * peak * (1.0 + 1e-9),
                "step {t}: {off} of {peak}"
            );
        }
        refined_by_step.push(source.counters().refinements - refinements);
    }
    assert!(refined_by_step[1] > 0, "{refined_by_step:?}");
    assert_eq!(
        refined_by_step[10..],
        [0, 0, 0, 0],
        "decayed updates go in one pass: {refined_by_step:?}"
    );
}

#[test]
fn a_context_without_feedback_never_refines() {
    let mut ctx = PushContext::new(THREE_LC, Feedback::Off);
    let mut wire = Vec::new();
    let refine = toward(1e-9, 8, PassScale::Max);
    let encoded = ctx
        .encode(&heavy_tailed(500, 1), THREE_LC, refine, 0, &mut wire)
        .unwrap();
    assert_eq!(encoded.frames, 1);
}

#[test]
fn off_never_asks_for_another_pass() {
    assert!(!Refinement::OFF.another_pass(1, f64::INFINITY));
    assert!(!Refinement::OFF.another_pass(1, f64::NAN));
}

#[test]
fn passes_stop_at_the_target_or_the_budget() {
    let r = toward(0.02, 3, PassScale::Max);
    assert!(r.another_pass(1, 0.5));
    assert!(r.another_pass(2, 0.021));
    assert!(!r.another_pass(2, 0.02));
    assert!(!r.another_pass(3, 0.5));
    assert!(r.another_pass(1, f64::NAN));
}

#[test]
fn relative_l2_of_edge_cases() {
    assert_eq!(relative_l2([0.0f32; 3].into_iter(), &[0.0; 3]), 0.0);
    assert_eq!(relative_l2([1.0f32].into_iter(), &[0.0]), f64::INFINITY);
    let e = relative_l2([3.0f32, 4.0].into_iter(), &[0.0, 50.0]);
    assert!((e - 0.1).abs() < 1e-12, "{e}");
}
