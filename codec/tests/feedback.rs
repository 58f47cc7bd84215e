//! Error feedback through an [`Encoder`]: nothing is lost, only delayed.
//!
//! Over any sequence of tensors, what was sent plus what is still in the
//! error buffer equals what was given, element by element, up to the f32
//! rounding of `acc = x + e` and `e = acc - sent` at each step.

mod common;

use common::*;
use tlc_codec::{Codec, EncodeError, Encoder, Feedback};

/// Feeds `xs` through `encoder` (switching codec before tensor `t` when
/// `switch(t)` says so) and checks
/// `sum(x) == sum(decoded) + residual` per element, in f64, within the
/// rounding the f32 steps can add.
fn check_conservation(
    label: &str,
    encoder: &mut Encoder,
    xs: &[Vec<f32>],
    mut switch: impl FnMut(usize) -> Option<Codec>,
) {
    let n = xs[0].len();
    let mut sum_x = vec![0f64; n];
    let mut sum_sent = vec![0f64; n];
    // Each step rounds twice (`x + e`, then `acc - sent`), each by at most
    // half an ulp of its result.
    let mut budget = vec![0f64; n];
    for (t, x) in xs.iter().enumerate() {
        if let Some(codec) = switch(t) {
            let before = bits(encoder.residual());
            encoder.set_codec(codec);
            assert_eq!(
                bits(encoder.residual()),
                before,
                "set_codec keeps the residual"
            );
        }
        let acc = accumulate(x, encoder.residual(), Feedback::On);
        let bytes = encode_one(encoder, x);
        let (decoded, frame) = decode_one(&bytes);
        assert!(frame.header.feedback);
        for i in 0..n {
            sum_x[i] += f64::from(x[i]);
            sum_sent[i] += f64::from(decoded[i]);
            let e = encoder.residual()[i];
            budget[i] +=
                (f64::from(acc[i].abs()) + f64::from(e.abs())) * f64::from(f32::EPSILON) / 2.0;
        }
    }
    let residual = encoder.residual();
    assert_eq!(residual.len(), n);
    for i in 0..n {
        let gap = (sum_x[i] - sum_sent[i] - f64::from(residual[i])).abs();
        assert!(
            gap <= budget[i],
            "{label}: element {i}: inputs {} != sent {} + residual {} (gap {gap:e}, budget {:e})",
            sum_x[i],
            sum_sent[i],
            residual[i],
            budget[i]
        );
    }
}

fn inputs(n: usize, steps: usize) -> Vec<Vec<f32>> {
    (0..steps)
        .map(|t| match t % 4 {
            0 => gradient(n, t as u64),
            1 => formula(n, t),
            2 => sparse_formula(n, t).iter().map(|v| v * 1e-3).collect(),
            _ => gradient(n, t as u64).iter().map(|v| v * 1e3).collect(),
        })
        .collect()
}

#[test]
fn sent_plus_residual_is_the_sum_of_inputs() {
    for (label, codec) in codecs() {
        for n in [1, 7, 70, 203] {
            let mut encoder = Encoder::new(codec, Feedback::On);
            check_conservation(label, &mut encoder, &inputs(n, 24), |_| None);
        }
    }
}

#[test]
fn lossy_codecs_really_carry_error() {
    // The invariant above would also hold for a codec that sent everything;
    // make sure the lossy ones leave something in the buffer.
    for (label, codec) in codecs() {
        if codec == Codec::None {
            continue;
        }
        let mut encoder = Encoder::new(codec, Feedback::On);
        encode_one(&mut encoder, &gradient(203, 1));
        assert!(
            encoder.residual().iter().any(|&e| e != 0.0),
            "{label} left no residual"
        );
    }
}

#[test]
fn switching_codec_mid_stream_keeps_the_residual() {
    let all: Vec<Codec> = codecs().into_iter().map(|(_, c)| c).collect();
    let mut encoder = Encoder::new(threelc(1.9), Feedback::On);
    // A new codec every three tensors, through the whole list twice.
    check_conservation("switching", &mut encoder, &inputs(141, 72), |t| {
        (t % 3 == 0).then(|| all[(t / 3) % all.len()])
    });
}

#[test]
fn the_new_codec_encodes_input_plus_old_residual() {
    for (label, codec) in codecs() {
        let mut encoder = Encoder::new(threelc(1.9), Feedback::On);
        for t in 0..3 {
            encode_one(&mut encoder, &gradient(77, t));
        }
        let residual = encoder.residual().to_vec();
        assert!(residual.iter().any(|&e| e != 0.0));
        encoder.set_codec(codec);
        assert_eq!(encoder.codec(), &codec);
        assert_eq!(bits(encoder.residual()), bits(&residual));
        let x = gradient(77, 9);
        let bytes = encode_one(&mut encoder, &x);
        let (_, frame) = decode_one(&bytes);

        // The same codec without feedback, given `x + residual` directly.
        let acc = accumulate(&x, &residual, Feedback::On);
        let mut fresh = Encoder::new(codec, Feedback::Off);
        if let Codec::TernGrad { .. } = codec {
            // TernGrad's random stream depends on the frame number.
            for _ in 0..3 {
                encode_one(&mut fresh, &x);
            }
        }
        let want_bytes = encode_one(&mut fresh, &acc);
        let (_, want) = decode_one(&want_bytes);
        assert_eq!(frame.header.params, want.header.params, "{label}");
        assert_eq!(frame.payload, want.payload, "{label}");
    }
}

#[test]
fn a_shape_change_resets_the_buffer() {
    for (label, codec) in codecs() {
        let mut encoder = Encoder::new(codec, Feedback::On);
        let mut shadow = Encoder::new(codec, Feedback::On);
        for t in 0..3 {
            encode_one(&mut encoder, &gradient(50, t));
            // A shadow with the same frame count but a zero residual for 60.
            encode_one(&mut shadow, &[1.0; 3]);
        }
        let y = gradient(60, 7);
        assert_same_next(&mut encoder, &mut shadow, &y, &label);
        assert_eq!(bits(encoder.residual()), bits(shadow.residual()), "{label}");
        assert_eq!(encoder.residual().len(), 60);
        // And back: the old buffer of 50 is gone too.
        let z = gradient(50, 8);
        let mut fresh_50 = Encoder::new(codec, Feedback::On);
        for _ in 0..4 {
            encode_one(&mut fresh_50, &[0.5; 2]);
        }
        assert_same_next(&mut encoder, &mut fresh_50, &z, &label);
    }
}

#[test]
fn reset_forgets_the_buffer_and_the_frame_count() {
    for (label, codec) in codecs() {
        let mut encoder = Encoder::new(codec, Feedback::On);
        for t in 0..3 {
            encode_one(&mut encoder, &gradient(33, t));
        }
        encoder.reset();
        assert!(encoder.residual().is_empty());
        assert_eq!(encoder.frames(), 0);
        let x = gradient(33, 5);
        let mut fresh = Encoder::new(codec, Feedback::On);
        assert_same_next(&mut encoder, &mut fresh, &x, &label);
    }
}

/// Asserts that `a` and `b` encode `x` to the same bytes: the state that
/// matters for the next frame (residual, frame count) is the same.
fn assert_same_next(a: &mut Encoder, b: &mut Encoder, x: &[f32], label: &dyn std::fmt::Display) {
    assert_eq!(encode_one(a, x), encode_one(b, x), "{label}");
}

/// An encoder with a non-trivial residual after a few tensors of 23 values.
fn primed(codec: Codec) -> Encoder {
    let mut encoder = Encoder::new(codec, Feedback::On);
    for t in 0..3 {
        encode_one(&mut encoder, &gradient(23, t));
    }
    encoder
}

/// `encode(bad)` fails with `want` and leaves the encoder and `out` as they
/// were: the next good tensor gives what an untouched clone gives.
fn check_failure_is_clean(
    label: &str,
    codec: Codec,
    bad: &[f32],
    want: impl Fn(&EncodeError) -> bool,
) {
    check_failure_leaves(label, primed(codec), bad, want);
}

fn check_failure_leaves(
    label: &str,
    mut encoder: Encoder,
    bad: &[f32],
    want: impl Fn(&EncodeError) -> bool,
) {
    let untouched = encoder.clone();
    let mut out = vec![1, 2, 3];
    let err = encoder.encode(bad, &mut out).unwrap_err();
    assert!(want(&err), "{label}: unexpected {err:?}");
    assert_eq!(out, [1, 2, 3], "{label}: output buffer changed");
    assert_eq!(
        bits(encoder.residual()),
        bits(untouched.residual()),
        "{label}"
    );
    assert_eq!(encoder.frames(), untouched.frames(), "{label}");
    let good = gradient(bad.len(), 11);
    let mut twin = untouched;
    assert_same_next(&mut encoder, &mut twin, &good, &label);
}

#[test]
fn a_non_finite_input_leaves_the_encoder_unchanged() {
    for (label, codec) in codecs() {
        if codec == Codec::None {
            continue; // lossless: passes NaN through, see below
        }
        for (at, bad_value) in [(0, f32::NAN), (3, f32::INFINITY), (22, f32::NEG_INFINITY)] {
            let mut bad = gradient(23, 4);
            bad[at] = bad_value;
            check_failure_is_clean(label, codec, &bad, |e| *e == EncodeError::NonFinite);
        }
    }
}

#[test]
fn a_residual_that_overflows_leaves_the_encoder_unchanged() {
    // Finite input whose sum with a huge residual rounds to infinity.
    let huge: Vec<f32> = (0..23)
        .map(|i| {
            if i % 3 == 0 {
                1e38
            } else {
                -1e38 / 23.0 * i as f32
            }
        })
        .collect();
    let mut overflowed = Vec::new();
    for (label, codec) in codecs() {
        let mut encoder = Encoder::new(codec, Feedback::On);
        if encoder.encode(&huge, &mut Vec::new()).is_err() {
            continue; // fp16 cannot take 1e38
        }
        let Some(i) = encoder.residual().iter().position(|e| e.abs() >= 1e32) else {
            continue; // none: nothing pending
        };
        let mut bad = gradient(23, 4);
        bad[i] = f32::MAX.copysign(encoder.residual()[i]);
        assert!((bad[i] + encoder.residual()[i]).is_infinite());
        check_failure_leaves(label, encoder, &bad, |e| *e == EncodeError::NonFinite);
        overflowed.push(label);
    }
    assert_eq!(overflowed.len(), codecs().len() - 2, "{overflowed:?}");
}

#[test]
fn out_of_range_leaves_the_encoder_unchanged() {
    let mut bad = gradient(23, 4);
    bad[5] = 70_000.0;
    check_failure_is_clean(
        "fp16",
        Codec::Fp16,
        &bad,
        |e| matches!(e, EncodeError::OutOfRange { codec: "fp16", index: 5, value } if *value >= 65520.0),
    );
    bad[5] = f32::MAX;
    check_failure_is_clean("bf16", Codec::Bf16, &bad, |e| {
        matches!(
            e,
            EncodeError::OutOfRange {
                codec: "bf16",
                index: 5,
                ..
            }
        )
    });
    // M = max|acc| * s overflows for s > 1.
    check_failure_is_clean("3lc", threelc(1.5), &bad, |e| {
        matches!(e, EncodeError::OutOfRange { codec: "3lc", .. })
    });
}

#[test]
fn feedback_off_keeps_no_state() {
    for (label, codec) in codecs() {
        let mut encoder = Encoder::new(codec, Feedback::Off);
        let x = gradient(41, 1);
        let first = encode_one(&mut encoder, &x);
        assert!(encoder.residual().is_empty());
        let second = encode_one(&mut encoder, &x);
        if !matches!(codec, Codec::TernGrad { .. }) {
            assert_eq!(first, second, "{label}: no memory between tensors");
        }
    }
}

#[test]
fn a_failed_tensor_of_a_new_shape_keeps_the_old_residual() {
    // encoder.rs documents "On error the context and `out` are as they
    // were", but the shape-change reset runs before the codec checks its input.
    for (label, codec) in codecs() {
        if codec == Codec::None {
            continue;
        }
        let mut encoder = primed(codec); // residual of 23 values
        let untouched = encoder.clone();
        let mut bad = gradient(30, 4);
        bad[2] = f32::NAN;
        assert_eq!(
            encoder.encode(&bad, &mut Vec::new()),
            Err(EncodeError::NonFinite)
        );
        assert_eq!(
            bits(encoder.residual()),
            bits(untouched.residual()),
            "{label}: residual lost"
        );
        // The stream of 23 carries on as if the bad tensor had not been offered.
        let good = gradient(23, 11);
        let mut twin = untouched;
        assert_same_next(&mut encoder, &mut twin, &good, &label);
    }
}

#[test]
fn none_with_feedback_does_not_carry_a_nan_forward() {
    let mut encoder = Encoder::new(Codec::None, Feedback::On);
    let first = encode_one(&mut encoder, &[f32::NAN, f32::INFINITY, 1.0]);
    let (decoded, _) = decode_one(&first);
    assert!(decoded[0].is_nan() && decoded[1] == f32::INFINITY);
    // Everything was sent, so nothing is pending.
    assert_eq!(
        bits(encoder.residual()),
        bits(&[0.0; 3]),
        "residual after NaN"
    );
    let second = encode_one(&mut encoder, &[1.0, 2.0, 3.0]);
    let (decoded, _) = decode_one(&second);
    assert_eq!(decoded, [1.0, 2.0, 3.0]);
}
