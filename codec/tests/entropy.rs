//! The entropy stage (frame flags bit 1, `FORMAT.md`): lossless under every
//! codec, used only when it saves bytes, off by default, and every hostile
//! stage (a `raw_len` the codec does not allow, short or garbage coded
//! bytes, coded bytes that expand to another length) a typed error.

mod common;

use common::*;
use proptest::prelude::*;
use tlc_codec::{DecodeError, Encoder, EntropyStage, Feedback, Frame};

const THREELC: u8 = 7;
const INT8: u8 = 3;
const FLAG_ENTROPY: u8 = 0x02;

fn entropy_error(bytes: &[u8]) -> &'static str {
    match decoded(bytes) {
        Err(DecodeError::Entropy(why)) => why,
        other => panic!("expected DecodeError::Entropy, got {other:?}"),
    }
}

/// An entropy-coded frame: `raw_len` and `coded` after the parameters.
fn staged(codec: u8, elements: u64, params: Vec<u8>, raw_len: u32, coded: &[u8]) -> RawFrame {
    let mut stored = raw_len.to_le_bytes().to_vec();
    stored.extend_from_slice(coded);
    let mut frame = RawFrame::new(codec, elements, params, stored);
    frame.flags = FLAG_ENTROPY;
    frame
}

fn zstd(raw: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(raw, 1).unwrap()
}

/// The 3LC frame of a gradient with the stage on, and its plain payload.
fn threelc_staged(n: usize, s: f32) -> (Vec<u8>, Vec<u8>) {
    let x = gradient(n, 5);
    let mut plain = Encoder::new(threelc(s), Feedback::Off);
    let payload = decode_one(&encode_one(&mut plain, &x)).1.payload.to_vec();
    let mut encoder = Encoder::new(threelc(s), Feedback::Off);
    encoder.set_entropy_stage(EntropyStage::Zstd);
    (encode_one(&mut encoder, &x), payload)
}

#[test]
fn every_codec_round_trips_with_and_without_the_stage() {
    for (label, codec) in codecs() {
        for feedback in [Feedback::On, Feedback::Off] {
            for &n in LENGTHS.iter().chain(&[5000, 20_000]) {
                let mut plain = Encoder::new(codec, feedback);
                let mut staged = Encoder::new(codec, feedback);
                assert_eq!(plain.entropy_stage(), EntropyStage::Off);
                staged.set_entropy_stage(EntropyStage::Zstd);
                for t in 0..3 {
                    let x = if t == 1 {
                        sparse_formula(n, t)
                    } else {
                        gradient(n, (n + t) as u64)
                    };
                    let a = encode_one(&mut plain, &x);
                    let b = encode_one(&mut staged, &x);
                    let (va, fa) = decode_one(&a);
                    let (vb, fb) = decode_one(&b);
                    let what = format!("{label} {feedback:?} n={n} t={t}");
                    assert_eq!(bits(&va), bits(&vb), "{what}: values");
                    assert_eq!(bits(plain.residual()), bits(staged.residual()), "{what}");
                    assert_eq!(fa.header.params, fb.header.params, "{what}");
                    assert_eq!(fa.header.raw_len, None, "{what}");
                    assert_eq!(fb.codec_payload().unwrap(), fa.payload, "{what}");
                    assert_eq!(fb.codec_payload().unwrap(), fa.codec_payload().unwrap());
                    match fb.header.raw_len {
                        // Used only when it saves bytes; else the plain frame.
                        Some(raw_len) => {
                            assert_eq!(raw_len, fa.header.payload_len, "{what}");
                            assert!(fb.header.payload_len < raw_len, "{what}");
                            assert_eq!(b[7] & FLAG_ENTROPY, FLAG_ENTROPY);
                        }
                        None => assert_eq!(a, b, "{what}: plain frame"),
                    }
                }
            }
        }
    }
}

#[test]
fn the_stage_shrinks_3lc_gradients() {
    for s in [1.0, 1.5, 1.75] {
        let (frame, payload) = threelc_staged(60_000, s);
        let f = Frame::parse(&frame, &LIMITS).unwrap();
        assert_eq!(f.header.raw_len, Some(payload.len() as u32));
        assert!(
            (f.header.payload_len as usize) < payload.len() * 9 / 10,
            "s={s}: {} of {}",
            f.header.payload_len,
            payload.len()
        );
        assert_eq!(f.header.codec_payload_len() as usize, payload.len());
        assert_eq!(f.header.frame_len(), frame.len());
    }
}

#[test]
fn feedback_and_entropy_flags_together() {
    let mut encoder = Encoder::new(threelc(1.5), Feedback::On);
    encoder.set_entropy_stage(EntropyStage::Zstd);
    let frame = encode_one(&mut encoder, &gradient(50_000, 1));
    assert_eq!(frame[7], 0x03);
    let f = Frame::parse(&frame, &LIMITS).unwrap();
    assert!(f.header.feedback && f.header.raw_len.is_some());
}

/// Every codec's payload, staged by hand (so also where the encoder would
/// not bother): decodes to what the plain frame does; `raw_len` one off
/// the codec's exact length is refused before anything is decompressed.
#[test]
fn every_codec_decodes_a_hand_staged_frame() {
    for (label, codec) in codecs() {
        let x = gradient(37, 3);
        let plain = encode_one(&mut Encoder::new(codec, Feedback::On), &x);
        let (values, frame) = decode_one(&plain);
        let id = plain[5];
        let params = plain[21..frame.header.header_len()].to_vec();
        let payload = frame.payload;
        let raw_len = payload.len() as u32;
        let bytes = staged(id, 37, params.clone(), raw_len, &zstd(payload)).bytes();
        assert_eq!(bits(&decoded(&bytes).unwrap()), bits(&values), "{label}");
        if label.starts_with("3lc") {
            continue; // a range, tested below
        }
        for wrong in [raw_len - 1, raw_len + 1] {
            let bytes = staged(id, 37, params.clone(), wrong, &zstd(payload)).bytes();
            assert!(
                matches!(
                    Frame::parse(&bytes, &LIMITS),
                    Err(DecodeError::PayloadLength { actual, .. }) if actual == u64::from(wrong)
                ),
                "{label} raw_len {wrong}"
            );
        }
    }
}

#[test]
fn raw_len_the_codec_does_not_allow() {
    // n = 700: L = 140, so a 3LC payload is 10..=140 bytes.
    let params = params2(1.0, 1.0);
    for raw_len in [0, 9, 141, 1 << 20, u32::MAX] {
        let coded = zstd(&[255u8; 10]);
        let bytes = staged(THREELC, 700, params.clone(), raw_len, &coded).bytes();
        match Frame::parse(&bytes, &LIMITS) {
            Err(DecodeError::PayloadLength { actual, .. }) => {
                assert_eq!(actual, u64::from(raw_len))
            }
            other => panic!("raw_len {raw_len}: {other:?}"),
        }
    }
    for raw_len in [10, 140] {
        let raw = vec![255u8; raw_len as usize];
        let bytes = staged(THREELC, 700, params.clone(), raw_len, &zstd(&raw)).bytes();
        if raw_len == 10 {
            assert_eq!(decoded(&bytes).unwrap(), vec![0.0; 700]);
        } else {
            // 140 run bytes expand to 1960 quartic bytes: the codec's own check.
            assert!(matches!(
                decoded(&bytes),
                Err(DecodeError::CorruptPayload(_))
            ));
        }
    }
    // int8's payload is exactly n bytes.
    let step = 0.5f32.to_le_bytes().to_vec();
    for raw_len in [2, 4] {
        let bytes = staged(INT8, 3, step.clone(), raw_len, &zstd(&[1, 2, 3])).bytes();
        assert!(matches!(
            Frame::parse(&bytes, &LIMITS),
            Err(DecodeError::PayloadLength { .. })
        ));
    }
    let bytes = staged(INT8, 3, step, 3, &zstd(&[1, 2, 3])).bytes();
    assert_eq!(decoded(&bytes).unwrap(), [0.5, 1.0, 1.5]);
}

#[test]
fn stored_bytes_too_short_for_raw_len() {
    for stored in [&[][..], &[10], &[10, 0, 0]] {
        let mut frame = RawFrame::new(THREELC, 700, params2(1.0, 1.0), stored.to_vec());
        frame.flags = FLAG_ENTROPY;
        assert_eq!(
            Frame::parse(&frame.bytes(), &LIMITS).unwrap_err(),
            DecodeError::Entropy("payload shorter than its 4-byte raw_len")
        );
    }
    let bytes = staged(THREELC, 700, params2(1.0, 1.0), 10, &[]).bytes();
    assert!(Frame::parse(&bytes, &LIMITS).is_ok());
    assert_eq!(entropy_error(&bytes), "no coded bytes");
}

#[test]
fn truncated_coded_bytes() {
    let (frame, _) = threelc_staged(20_000, 1.0);
    let f = Frame::parse(&frame, &LIMITS).unwrap();
    let raw_len = f.header.raw_len.unwrap();
    let coded = &f.payload[4..];
    for cut in 1..coded.len() {
        let bytes = staged(
            THREELC,
            20_000,
            frame[21..29].to_vec(),
            raw_len,
            &coded[..cut],
        );
        entropy_error(&bytes.bytes());
    }
}

#[test]
fn coded_bytes_that_expand_to_another_length() {
    // n = 700, raw_len = 10: zstd frames of 9 and 11 bytes, and a frame
    // claiming far more than the buffer (no allocation follows the claim).
    let params = params2(1.0, 1.0);
    let short = staged(THREELC, 700, params.clone(), 10, &zstd(&[255; 9])).bytes();
    assert_eq!(entropy_error(&short), "coded bytes expand short of raw_len");
    let long = staged(THREELC, 700, params.clone(), 10, &zstd(&[255; 11])).bytes();
    assert_eq!(entropy_error(&long), "Destination buffer is too small");
    let huge = staged(THREELC, 700, params.clone(), 10, &zstd(&vec![255; 1 << 20])).bytes();
    assert_eq!(entropy_error(&huge), "Destination buffer is too small");
    // Two frames whose contents add up to raw_len are one payload.
    let mut two = zstd(&[255; 4]);
    two.extend(zstd(&[255; 6]));
    let bytes = staged(THREELC, 700, params, 10, &two).bytes();
    assert_eq!(decoded(&bytes).unwrap(), vec![0.0; 700]);
}

#[test]
fn bit_1_set_on_a_plain_payload_or_garbage() {
    // A plain 3LC payload under bit 1: its first four bytes read as raw_len.
    let mut frame = RawFrame::new(THREELC, 7, params2(1.0, 1.0), vec![202, 94]);
    frame.flags = FLAG_ENTROPY;
    assert!(Frame::parse(&frame.bytes(), &LIMITS).is_err());
    let mut x = 0x1234_5678u32;
    for len in [1usize, 2, 5, 13, 40, 139] {
        let garbage: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let bytes = staged(THREELC, 700, params2(1.0, 1.0), 10, &garbage).bytes();
        entropy_error(&bytes);
        // Garbage behind a zstd magic number.
        let mut magic = vec![0x28, 0xb5, 0x2f, 0xfd];
        magic.extend(&garbage);
        let bytes = staged(THREELC, 700, params2(1.0, 1.0), 10, &magic).bytes();
        entropy_error(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any byte of an entropy-coded frame flipped (checksum fixed, so the
    /// stage is reached): a typed error or, where zstd's own format has
    /// slack, a valid payload; never a panic, never more values than `n`.
    #[test]
    fn flipped_coded_bytes_never_panic(
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let (frame, _) = threelc_staged(5000, 1.5);
        let mut body = frame[..frame.len() - 4].to_vec();
        let i = 29 + at.index(body.len() - 29);
        body[i] ^= mask;
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        if let Ok(values) = decoded(&body) {
            prop_assert_eq!(values.len(), 5000);
        }
    }
}
