//! Every codec, with error feedback on and off, across tensor lengths at the
//! quartic, zero-run and bitmap boundaries: encode through an [`Encoder`],
//! decode with [`tlc_codec::decode`], and check the length, the header and
//! the codec's own error bound against what the encoder quantized
//! (`x + e` with feedback). With feedback the new residual must be exactly
//! `acc - decoded`.

mod common;

use common::*;
use tlc_codec::{Codec, Encoder, Feedback, FrameHeader, Params};

/// The tensors fed through one encoder for one length.
fn stream(n: usize) -> Vec<Vec<f32>> {
    vec![
        formula(n, 0),
        gradient(n, n as u64 + 1),
        vec![0.0; n],
        sparse_formula(n, 1),
        formula(n, 2).iter().map(|v| v * -1e-3).collect(),
        gradient(n, 99).iter().map(|v| v * 1e4).collect(),
    ]
}

fn max_abs(acc: &[f32]) -> f32 {
    acc.iter().fold(0f32, |m, a| m.max(a.abs()))
}

/// Checks `decoded` against `acc` for the frame's codec.
fn check_values(codec: &Codec, header: &FrameHeader, payload: &[u8], acc: &[f32], decoded: &[f32]) {
    let max = max_abs(acc);
    match header.params {
        Params::None => assert_eq!(bits(decoded), bits(acc)),
        Params::Fp16 => {
            for (a, d) in acc.iter().zip(decoded) {
                // Half an ulp of a normal binary16 is at most |a| * 2^-11;
                // below 2^-14 the spacing is 2^-24.
                let bound = a.abs() * 2f32.powi(-11) + 2f32.powi(-25);
                assert!((a - d).abs() <= bound, "fp16: {a} -> {d}");
            }
        }
        Params::Bf16 => {
            for (a, d) in acc.iter().zip(decoded) {
                // 2^-134 (half the bf16 subnormal spacing) as bits:
                // `powi(-134)` would overflow on the way.
                let bound = a.abs() * 2f32.powi(-8) + f32::from_bits(1 << 15);
                assert!((a - d).abs() <= bound, "bf16: {a} -> {d}");
            }
        }
        Params::Int8 { step } => {
            assert_eq!(step, max / 127.0);
            for (a, d) in acc.iter().zip(decoded) {
                if step > 0.0 {
                    // The decoder computes `q * step` for an integer level `q`.
                    let q = (d / step).round();
                    assert_eq!(*d, q * step, "int8 level of {d} not an integer");
                    assert!(q.abs() <= 127.0);
                }
                // Rounding of `a / step` and of `q * step` adds a few ulps.
                let bound = step / 2.0 + a.abs() * 4.0 * f32::EPSILON;
                assert!((a - d).abs() <= bound, "int8: {a} -> {d}, step {step}");
            }
        }
        Params::Int8Rows { row_len } => {
            // Each row within half of its own step, whatever the others'.
            let row = row_len as usize;
            for (acc_row, decoded_row) in acc.chunks(row).zip(decoded.chunks(row)) {
                let step = max_abs(acc_row) / 127.0;
                for (a, d) in acc_row.iter().zip(decoded_row) {
                    let bound = step / 2.0 + a.abs() * 4.0 * f32::EPSILON;
                    assert!((a - d).abs() <= bound, "int8-rows: {a} -> {d}, step {step}");
                }
            }
        }
        Params::TernGrad { scale } => {
            assert_eq!(scale, max);
            for (a, d) in acc.iter().zip(decoded) {
                assert!(
                    *d == 0.0 || (d.abs() == scale && (d > &0.0) == (a > &0.0)),
                    "terngrad: {a} -> {d}, scale {scale}"
                );
                if *a == 0.0 {
                    assert_eq!(*d, 0.0);
                }
            }
        }
        Params::OneBit { positive, negative } => {
            let (mut sp, mut np, mut sn, mut nn) = (0f64, 0u32, 0f64, 0u32);
            for &a in acc {
                if a >= 0.0 {
                    sp += f64::from(a);
                    np += 1;
                } else {
                    sn += f64::from(a);
                    nn += 1;
                }
            }
            let close = |got: f32, sum: f64, count: u32| {
                let want = if count == 0 {
                    0.0
                } else {
                    sum / f64::from(count)
                };
                // f32 rounding of the f64 mean; subnormal means round to 2^-149.
                (f64::from(got) - want).abs() <= want.abs() * 1e-6 + f64::from(f32::from_bits(1))
            };
            assert!(close(positive, sp, np), "positive mean {positive}");
            assert!(close(negative, sn, nn), "negative mean {negative}");
            for (a, d) in acc.iter().zip(decoded) {
                let want = if *a >= 0.0 { positive } else { negative };
                assert_eq!(d.to_bits(), want.to_bits(), "onebit: {a} -> {d}");
            }
        }
        Params::TopK { percent, kept } => {
            let Codec::TopK { percent: asked } = codec else {
                panic!("topk frame from {codec}")
            };
            assert_eq!(percent, asked.get());
            let mut min_kept = f32::INFINITY;
            let mut max_dropped = 0f32;
            let mut count = 0;
            for (a, d) in acc.iter().zip(decoded) {
                if *d == 0.0 {
                    max_dropped = max_dropped.max(a.abs());
                } else {
                    assert_eq!(d.to_bits(), a.to_bits(), "kept values are exact");
                    min_kept = min_kept.min(a.abs());
                    count += 1;
                }
            }
            assert_eq!(kept, count);
            // Small tensors sort every magnitude, so the split is exact.
            assert!(max_dropped < min_kept || count == 0);
            let nonzero = acc.iter().filter(|a| **a != 0.0).count();
            let want = ((acc.len() as f64 * f64::from(percent) / 100.0).ceil() as usize).max(1);
            assert!(
                count as usize >= want.min(nonzero),
                "kept {count} of {nonzero}"
            );
        }
        Params::ThreeLc { scale, sparsity } => {
            let Codec::ThreeLc { sparsity: s } = codec else {
                panic!("3lc frame from {codec}")
            };
            assert_eq!(sparsity, s.get());
            assert_eq!(scale, max * s.get());
            let (m, want) = reference::encode(acc, &mut [], s.get());
            assert_eq!(m, scale);
            assert_eq!(payload, &want[..], "payload differs from the reference");
            for (a, d) in acc.iter().zip(decoded) {
                assert!(*d == 0.0 || d.abs() == scale, "3lc: {a} -> {d}");
                let q = if scale == 0.0 {
                    0.0
                } else {
                    (a / scale).round_ties_even()
                };
                assert_eq!(*d, scale * q, "3lc: {a} -> {d}, M {scale}");
            }
        }
    }
}

fn check_codec(label: &str, codec: Codec) {
    for feedback in [Feedback::On, Feedback::Off] {
        for &n in LENGTHS {
            let mut encoder = Encoder::new(codec, feedback);
            for (t, x) in stream(n).into_iter().enumerate() {
                let context = format!("{label} {feedback:?} n={n} t={t}");
                let before = encoder.residual().to_vec();
                let acc = accumulate(&x, &before, feedback);
                // The frame is appended after what the buffer already holds.
                let mut out = vec![0xa5, 0x5a];
                let header = encoder.encode(&x, &mut out).expect(&context);
                assert_eq!(out[..2], [0xa5, 0x5a], "{context}");
                let bytes = &out[2..];
                assert_eq!(header.frame_len(), bytes.len(), "{context}");
                let (decoded, frame) = decode_one(bytes);
                assert_eq!(frame.header, header, "{context}");
                assert_eq!(header.elements, n as u64, "{context}");
                assert_eq!(header.codec(), codec.id(), "{context}");
                assert_eq!(header.feedback, feedback == Feedback::On, "{context}");
                assert_eq!(decoded.len(), n, "{context}");
                assert_eq!(encoder.frames(), t as u64 + 1);
                check_values(&codec, &header, frame.payload, &acc, &decoded);
                match feedback {
                    Feedback::On => {
                        let want: Vec<f32> = acc.iter().zip(&decoded).map(|(a, d)| a - d).collect();
                        assert_eq!(bits(encoder.residual()), bits(&want), "{context}");
                    }
                    Feedback::Off => assert!(encoder.residual().is_empty(), "{context}"),
                }
            }
        }
    }
}

macro_rules! roundtrip_tests {
    ($($name:ident => $codec:expr,)*) => {
        $(
            #[test]
            fn $name() {
                check_codec(stringify!($name), $codec);
            }
        )*
    };
}

roundtrip_tests! {
    none => Codec::None,
    fp16 => Codec::Fp16,
    bf16 => Codec::Bf16,
    int8 => Codec::Int8,
    int8_rows_32 => Codec::Int8Rows { row_len: 32 },
    int8_rows_7 => Codec::Int8Rows { row_len: 7 },
    terngrad => Codec::TernGrad { seed: 7 },
    onebit => Codec::OneBit,
    topk_25 => topk(25.0),
    topk_5 => topk(5.0),
    threelc_s1_0 => threelc(1.0),
    threelc_s1_5 => threelc(1.5),
    threelc_s1_75 => threelc(1.75),
    threelc_s1_9 => threelc(1.9),
}

#[test]
fn special_tensors() {
    let cases: Vec<Vec<f32>> = vec![
        vec![],
        vec![0.0; 71],
        vec![-0.0; 9],
        vec![1.5; 13],
        vec![-2.0; 6],
        {
            let mut spike = vec![0.0; 141];
            spike[140] = -3.0;
            spike
        },
        vec![f32::MIN_POSITIVE; 7],
        vec![1e-40, -1e-42, 0.0, 3e-39, -1e-45],
        vec![60000.0, -65504.0, 1.0, -1e-3, 7.0],
    ];
    for (label, codec) in codecs() {
        for feedback in [Feedback::On, Feedback::Off] {
            let mut encoder = Encoder::new(codec, feedback);
            for x in &cases {
                // Twice: the second pass sees the residual of the first.
                for _ in 0..2 {
                    let acc = accumulate(x, encoder.residual(), feedback);
                    let bytes = encode_one(&mut encoder, x);
                    let (decoded, frame) = decode_one(&bytes);
                    assert_eq!(decoded.len(), x.len(), "{label}");
                    check_values(&codec, &frame.header, frame.payload, &acc, &decoded);
                }
            }
        }
    }
}

#[test]
fn three_lc_values_are_zero_or_plus_minus_m() {
    for s in [1.0, 1.5, 1.75, 1.9] {
        let mut encoder = Encoder::new(threelc(s), Feedback::On);
        for t in 0..10 {
            let x = gradient(1003, t);
            let bytes = encode_one(&mut encoder, &x);
            let (decoded, frame) = decode_one(&bytes);
            let tlc_codec::Params::ThreeLc { scale, .. } = frame.header.params else {
                panic!()
            };
            assert!(scale > 0.0);
            assert!(decoded
                .iter()
                .all(|&d| d == 0.0 || d == scale || d == -scale));
            // s = 1 sends the largest value itself; larger s sends fewer values.
            if s == 1.0 {
                assert!(decoded.iter().any(|d| d.abs() == scale));
            }
        }
    }
}

#[test]
fn larger_sparsity_sends_fewer_bytes() {
    let x = gradient(10_000, 5);
    let mut sizes = Vec::new();
    for s in [1.0, 1.5, 1.75, 1.9] {
        let mut encoder = Encoder::new(threelc(s), Feedback::Off);
        sizes.push(encode_one(&mut encoder, &x).len());
    }
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
    // 3LC is far below 2 bits per value on gradient-like data.
    assert!(sizes[0] * 8 < 2 * 10_000, "{sizes:?}");
}

#[test]
fn int8_of_f32_max_decodes_finite() {
    // step = f32::MAX / 127 rounds up, so level 127 decodes to +inf: the
    // receiver gets an infinity for a finite input, and with feedback the
    // residual becomes -inf (every later tensor fails with NonFinite).
    let x = [f32::MAX, 1.0, -f32::MAX];
    let mut encoder = Encoder::new(Codec::Int8, Feedback::On);
    let mut out = Vec::new();
    match encoder.encode(&x, &mut out) {
        Err(tlc_codec::EncodeError::OutOfRange { .. }) => {}
        Err(other) => panic!("{other:?}"),
        Ok(_) => {
            let (decoded, _) = decode_one(&out);
            assert!(decoded.iter().all(|d| d.is_finite()), "{decoded:?}");
            assert!(encoder.residual().iter().all(|e| e.is_finite()));
        }
    }
}

#[test]
fn three_lc_out_of_range_names_the_offending_value() {
    // EncodeError::OutOfRange documents `index` as the position of the
    // offending value; fp16 and bf16 report it, 3LC always says 0.
    let x = [1.0, -2.0, f32::MAX, 0.5];
    let err = Encoder::new(threelc(1.5), Feedback::Off)
        .encode(&x, &mut Vec::new())
        .unwrap_err();
    assert_eq!(
        err,
        tlc_codec::EncodeError::OutOfRange {
            codec: "3lc",
            value: f32::MAX,
            index: 2
        }
    );
}
