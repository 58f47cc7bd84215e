//! Tests of rows pushes: a holder's [`RowErrors`] against
//! [`restore_push`], through envelopes.

use super::tests::{three_lc, Rng};
use super::*;
use tlc_codec::{Codec, Limits};
use tlc_wire::envelope::{write_rows_envelope, Envelope, Kind};
use tlc_wire::rows::RowsSection;

/// Encodes on the holder, restores on the requester; returns the restored
/// values and the decoded row per distinct id (first-appearance order).
fn push(
    errors: &mut RowErrors,
    ids: &[i64],
    values: &[f32],
    codec: Codec,
) -> (Vec<f32>, Vec<(i64, Vec<f32>)>) {
    let mut u = Uniques::new();
    let mut wire = Vec::new();
    let encoded = errors
        .encode(ids, values, &codec, 5, &mut u, &mut wire)
        .unwrap();
    let env = Envelope::parse(&wire, &Limits::default()).unwrap();
    assert_eq!(env.header.kind, Kind::RowsPush);
    let mut out = vec![9.0; 3];
    let applied = restore_push(ids, &env, &mut u, &mut out).unwrap();
    assert_eq!((applied.unique, applied.hits), (encoded.unique, 0));
    let dim = errors.dim();
    assert_eq!(out.len(), ids.len() * dim);
    // Per id, the restored rows summed (as the consumer does).
    let mut rows: Vec<(i64, Vec<f32>)> = Vec::new();
    for (&id, row) in ids.iter().zip(out.chunks_exact(dim)) {
        match rows.iter_mut().find(|(i, _)| *i == id) {
            Some((_, sum)) => {
                // Later duplicates are zeros.
                assert!(row.iter().all(|&v| v == 0.0));
                sum.iter_mut().zip(row).for_each(|(s, v)| *s += v);
            }
            None => rows.push((id, row.to_vec())),
        }
    }
    assert_eq!(rows.len(), encoded.unique);
    (out, rows)
}

/// Per-id sums of `values` in position order, first-appearance order.
fn sums(ids: &[i64], values: &[f32], dim: usize) -> Vec<(i64, Vec<f32>)> {
    let mut rows: Vec<(i64, Vec<f32>)> = Vec::new();
    for (&id, row) in ids.iter().zip(values.chunks_exact(dim)) {
        match rows.iter_mut().find(|(i, _)| *i == id) {
            Some((_, sum)) => sum.iter_mut().zip(row).for_each(|(s, v)| *s += v),
            None => rows.push((id, row.to_vec())),
        }
    }
    rows
}

fn noise(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.unit() as f32 - 0.5) * 0.02).collect()
}

#[test]
fn lossless_pushes_restore_the_sums() {
    let dim = 3;
    let mut errors = RowErrors::new(dim, 100);
    let ids = [4, 2, 4, 4, 9, 2];
    let values: Vec<f32> = (0..18).map(|i| i as f32 * 0.5 - 3.0).collect();
    let (out, rows) = push(&mut errors, &ids, &values, Codec::None);
    assert_eq!(rows, sums(&ids, &values, dim));
    // Each id's first position holds its sum, the others zeros.
    assert_eq!(out[..3], rows[0].1[..]);
    assert_eq!(out[3..6], rows[1].1[..]);
    assert_eq!(out[6..12], [0.0; 6]);
    assert_eq!(out[12..15], rows[2].1[..]);
    assert_eq!(out[15..], [0.0; 3]);
    // Lossless: no error carried.
    assert_eq!(errors.rows(), 3);
    assert!([4, 2, 9]
        .iter()
        .all(|&id| errors.error(id).unwrap().iter().all(|&e| e == 0.0)));
    // Empty.
    let (out, rows) = push(&mut errors, &[], &[], Codec::None);
    assert!(out.is_empty() && rows.is_empty());
}

#[test]
fn error_feedback_per_row_stays_bounded() {
    // 3LC s=1.0 over many steps: per row, what was pushed in total minus
    // what was restored in total is exactly the row's carried error, and
    // that stays bounded instead of growing with the steps.
    let dim = 16;
    let mut errors = RowErrors::new(dim, 10_000);
    let mut rng = Rng(0xfeed_beef_1234_5678);
    let mut truth: Vec<f64> = vec![0.0; 200 * dim];
    let mut restored: Vec<f64> = vec![0.0; 200 * dim];
    let mut largest_step = 0f32;
    for _ in 0..300 {
        let ids: Vec<i64> = (0..64).map(|_| rng.zipf(200)).collect();
        let values = noise(&mut rng, ids.len() * dim);
        let (_, rows) = push(&mut errors, &ids, &values, three_lc());
        for (id, sum) in sums(&ids, &values, dim) {
            let at = id as usize * dim;
            for (t, v) in truth[at..at + dim].iter_mut().zip(&sum) {
                *t += f64::from(*v);
                largest_step = largest_step.max(v.abs());
            }
        }
        for (id, row) in rows {
            let at = id as usize * dim;
            for (r, v) in restored[at..at + dim].iter_mut().zip(&row) {
                *r += f64::from(*v);
            }
        }
    }
    assert!(errors.rows() <= 200);
    assert_eq!(errors.evictions(), 0);
    let mut worst_gap = 0f64;
    for id in 0..200i64 {
        let at = id as usize * dim;
        let error = errors.error(id);
        for i in 0..dim {
            let gap = truth[at + i] - restored[at + i];
            let carried = error.map_or(0.0, |e| f64::from(e[i]));
            assert!((gap - carried).abs() < 1e-4, "id {id}: {gap} vs {carried}");
            worst_gap = worst_gap.max(gap.abs());
        }
    }
    println!("worst gap {worst_gap}, largest row sum {largest_step}");
    // Hot rows were pushed ~100 times; their gap is still of the order of
    // one step's row, not of the sum.
    assert!(
        worst_gap < 4.0 * f64::from(largest_step),
        "gap {worst_gap}, step {largest_step}"
    );
}

#[test]
fn row_errors_evict_by_step() {
    let dim = 2;
    let mut errors = RowErrors::new(dim, 50);
    let mut rng = Rng(77);
    let mut evicted = 0;
    for step in 0..100 {
        let ids: Vec<i64> = (0..20).map(|i| (step * 7 + i) % 400).collect();
        let values = noise(&mut rng, ids.len() * dim);
        let mut wire = Vec::new();
        let e = errors
            .encode(
                &ids,
                &values,
                &three_lc(),
                0,
                &mut Uniques::new(),
                &mut wire,
            )
            .unwrap();
        evicted += e.evicted;
        assert!(errors.rows() <= 50);
        // This push's rows all have an error buffer now.
        assert!(ids.iter().all(|&id| errors.error(id).is_some()));
    }
    assert!(evicted > 0);
    assert_eq!(errors.evictions(), evicted as u64);
    assert!(errors.bytes() < 50 * (4 * dim + 64) + 1024);
}

#[test]
fn push_encode_refusals_change_nothing() {
    let mut errors = RowErrors::new(2, 3);
    let mut u = Uniques::new();
    let mut wire = vec![1];
    errors
        .encode(
            &[1, 2],
            &[0.3, -0.1, 0.2, 0.05],
            &three_lc(),
            0,
            &mut u,
            &mut wire,
        )
        .unwrap();
    let before: Vec<f32> = errors.error(1).unwrap().to_vec();
    let len = wire.len();
    let err = errors
        .encode(&[1, 2, 3, 4], &[0.0; 8], &three_lc(), 0, &mut u, &mut wire)
        .unwrap_err();
    assert_eq!(
        err,
        RowsError::TooManyRows {
            unique: 4,
            max_rows: 3
        }
    );
    let err = errors
        .encode(
            &[1],
            &[f32::INFINITY, 0.0],
            &three_lc(),
            0,
            &mut u,
            &mut wire,
        )
        .unwrap_err();
    assert!(matches!(err, RowsError::Encode(_)), "{err}");
    let err = errors
        .encode(&[1], &[0.0; 3], &three_lc(), 0, &mut u, &mut wire)
        .unwrap_err();
    assert!(matches!(err, RowsError::ValuesLength { .. }), "{err}");
    assert_eq!(wire.len(), len);
    assert_eq!(errors.error(1).unwrap(), &before[..]);
    assert_eq!(errors.rows(), 2);
}

#[test]
fn restore_push_refuses_other_ids() {
    let mut errors = RowErrors::new(2, 10);
    let mut u = Uniques::new();
    let mut wire = Vec::new();
    let ids = [3, 1, 3];
    errors
        .encode(&ids, &[0.5; 6], &three_lc(), 0, &mut u, &mut wire)
        .unwrap();
    let env = Envelope::parse(&wire, &Limits::default()).unwrap();
    let mut out = Vec::new();
    let err = restore_push(&[3, 1, 1], &env, &mut u, &mut out).unwrap_err();
    assert!(matches!(err, RowsError::IdsHash { .. }), "{err}");
    let err = restore_push(&[3, 1], &env, &mut u, &mut out).unwrap_err();
    assert_eq!(err, RowsError::Positions { have: 2, got: 3 });
    // A section claiming another count of distinct ids (frame to match).
    let real = env.rows().unwrap();
    let forged = RowsSection { unique: 3, ..real };
    let mut frame = Vec::new();
    tlc_codec::Encoder::new(Codec::None, tlc_codec::Feedback::Off)
        .encode(&[0.0; 6], &mut frame)
        .unwrap();
    let mut bad = Vec::new();
    write_rows_envelope(&env.header, &forged, &[frame], &mut bad).unwrap();
    let bad = Envelope::parse(&bad, &Limits::default()).unwrap();
    let err = restore_push(&ids, &bad, &mut u, &mut out).unwrap_err();
    assert_eq!(err, RowsError::Unique { have: 2, got: 3 });
    // A rows pull is not a push.
    let mut pull = Vec::new();
    RowMirror::new(1, 2, 10)
        .encode(
            &ids,
            &[0.5; 6],
            &Codec::None,
            &three_lc(),
            0,
            &mut u,
            &mut pull,
        )
        .unwrap();
    let pull = Envelope::parse(&pull, &Limits::default()).unwrap();
    assert_eq!(
        restore_push(&ids, &pull, &mut u, &mut out).unwrap_err(),
        RowsError::WrongKind {
            expected: Kind::RowsPush,
            got: Kind::RowsPull
        }
    );
    assert!(restore_push(&ids, &env, &mut u, &mut out).is_ok());
}

#[test]
fn refinement_passes_bound_what_a_push_leaves_behind() {
    // Every push with passes leaves at most the target (or used all its
    // frames), restores exactly what the holder counts as sent, and over
    // many steps the carried errors add up to less than without passes.
    let dim = 16;
    let refine = Refinement {
        target: 0.5,
        max_passes: 8,
        scale: crate::refine::PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: crate::regime::Regimes::OFF,
    };
    let mut carried = [0.0f64; 2];
    for (with, total) in carried.iter_mut().enumerate() {
        let mut errors = RowErrors::new(dim, 10_000);
        if with == 1 {
            errors.set_refinement(refine);
        }
        let mut rng = Rng(0x1357_9bdf_2468_ace0);
        let mut frames_seen = 0;
        for _ in 0..100 {
            let ids: Vec<i64> = (0..64).map(|_| rng.zipf(500)).collect();
            let values = noise(&mut rng, ids.len() * dim);
            let mut u = Uniques::new();
            let mut wire = Vec::new();
            errors
                .encode(&ids, &values, &three_lc(), 1, &mut u, &mut wire)
                .unwrap();
            let env = Envelope::parse(&wire, &Limits::default()).unwrap();
            frames_seen = frames_seen.max(env.frames().len());
            let mut out = Vec::new();
            restore_push(&ids, &env, &mut u, &mut out).unwrap();
            // What crossed plus what is carried is what was pushed, per id.
            let pushed_norm: f64 = sums(&ids, &values, dim)
                .iter()
                .flat_map(|(_, r)| r.iter())
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
                .sqrt();
            let left: f64 = sums(&ids, &values, dim)
                .iter()
                .flat_map(|(id, _)| errors.error(*id).unwrap().iter())
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
                .sqrt();
            if with == 1 && env.frames().len() < 8 {
                assert!(
                    left <= 0.5 * pushed_norm * 1.0001,
                    "{left} vs {pushed_norm}"
                );
            }
        }
        if with == 1 {
            assert!(frames_seen > 1, "no pass was ever needed");
        } else {
            assert_eq!(frames_seen, 1);
        }
        *total = (0..500i64)
            .filter_map(|id| errors.error(id))
            .flat_map(|e| e.iter())
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            .sqrt();
    }
    assert!(carried[1] < carried[0] * 0.8, "{carried:?}");
}
