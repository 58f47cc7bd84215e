//! Hand-built hostile frames. Each carries a correct CRC32C (see
//! [`RawFrame::bytes`]) unless the checksum is what is under test, so it
//! reaches the check it is aimed at, and each asserts the exact
//! [`DecodeError`] it must produce.

mod common;

use common::*;
use tlc_codec::{decode, Codec, DecodeError, Encoder, Feedback, Frame};

/// Wire ids, written out rather than taken from the library.
const NONE: u8 = 0;
const FP16: u8 = 1;
const BF16: u8 = 2;
const INT8: u8 = 3;
const INT8_ROWS: u8 = 8;
const TERNGRAD: u8 = 4;
const ONEBIT: u8 = 5;
const TOPK: u8 = 6;
const THREELC: u8 = 7;

fn parse(bytes: &[u8]) -> Result<Frame<'_>, DecodeError> {
    Frame::parse(bytes, &LIMITS)
}

fn corrupt(bytes: &[u8]) -> &'static str {
    match decoded(bytes) {
        Err(DecodeError::CorruptPayload(why)) => why,
        other => panic!("expected CorruptPayload, got {other:?}"),
    }
}

fn bad_params(bytes: &[u8]) -> String {
    match parse(bytes) {
        Err(DecodeError::BadParams(why)) => why,
        other => panic!("expected BadParams, got {other:?}"),
    }
}

fn three_lc(elements: u64, payload: Vec<u8>) -> RawFrame {
    RawFrame::new(THREELC, elements, params2(1.0, 1.5), payload)
}

/// The valid 3LC frame of 7 values (`[1, 0, 0, -1, 0, 0, 0]`), with
/// `edit` made to it.
fn valid_with(edit: impl FnOnce(&mut RawFrame)) -> RawFrame {
    let mut frame = three_lc(7, vec![202, 94]);
    edit(&mut frame);
    frame
}

/// Why `frame` does not parse (the test fails if it does).
fn parse_error(frame: &RawFrame) -> DecodeError {
    parse(&frame.bytes()).unwrap_err()
}

/// One valid frame of every codec, from the encoder.
fn valid_frames() -> Vec<(&'static str, Vec<u8>)> {
    codecs()
        .into_iter()
        .map(|(label, codec)| {
            let mut encoder = Encoder::new(codec, Feedback::On);
            (label, encode_one(&mut encoder, &gradient(37, 3)))
        })
        .collect()
}

#[test]
fn the_frame_builder_writes_valid_frames() {
    // n = 7: L = 2; payload [202, 94] is 1, 0, 0, -1, 0, 0, 0.
    let bytes = three_lc(7, vec![202, 94]).bytes();
    assert_eq!(
        decoded(&bytes).unwrap(),
        [1.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0]
    );
    let int8 = RawFrame::new(INT8, 3, 0.5f32.to_le_bytes().to_vec(), vec![2, 0xff, 127]);
    assert_eq!(decoded(&int8.bytes()).unwrap(), [1.0, -0.5, 63.5]);
    for (label, frame) in valid_frames() {
        assert!(decoded(&frame).is_ok(), "{label}");
    }
}

#[test]
fn zero_run_bomb_beyond_the_limit() {
    // A few run bytes claiming a billion values: refused before any allocation.
    for elements in [1_000_000_000, u64::MAX, LIMITS.max_elements + 1] {
        let bytes = three_lc(elements, vec![255; 8]).bytes();
        let want = DecodeError::TooManyElements {
            elements,
            limit: LIMITS.max_elements,
        };
        assert_eq!(parse(&bytes).unwrap_err(), want);
        let mut out = Vec::new();
        assert_eq!(decode(&bytes, &LIMITS, &mut out).unwrap_err(), want);
        assert_eq!(out.capacity(), 0, "nothing allocated");
    }
    // At the limit is fine: 2^16 zeros, L = 13108 quartic bytes, 937 run bytes.
    let n = LIMITS.max_elements;
    let l = n.div_ceil(5) as usize;
    let payload = reference::zero_run(&vec![121; l]);
    let values = decoded(&three_lc(n, payload).bytes()).unwrap();
    assert_eq!(values.len() as u64, n);
    assert!(values.iter().all(|&v| v == 0.0));
}

#[test]
fn zero_runs_expanding_past_the_tensor() {
    // n = 100: L = 20 quartic bytes.
    let past = "zero runs expand past the tensor";
    assert_eq!(corrupt(&three_lc(100, vec![255, 255]).bytes()), past);
    let mut payload = vec![121; 19];
    payload.push(243); // 19 + 2 = 21
    assert_eq!(corrupt(&three_lc(100, payload).bytes()), past);
    assert_eq!(corrupt(&three_lc(100, vec![255, 248]).bytes()), past); // 14 + 7
                                                                       // Exactly 20 is fine.
    assert!(decoded(&three_lc(100, vec![255, 247]).bytes()).is_ok()); // 14 + 6
                                                                      // A run after the tensor is complete.
    let mut payload = vec![121; 20];
    payload[19] = 243;
    assert_eq!(corrupt(&three_lc(100, payload).bytes()), past);
}

#[test]
fn zero_runs_expanding_short_of_the_tensor() {
    let short = "zero runs expand short of the tensor";
    assert_eq!(corrupt(&three_lc(100, vec![255, 121]).bytes()), short); // 15 of 20
    assert_eq!(corrupt(&three_lc(100, vec![254, 0, 121]).bytes()), short); // 13 + 2
                                                                           // Fewer bytes than even all-maximal runs need is a length error.
    assert_eq!(
        parse(&three_lc(100, vec![255]).bytes()).unwrap_err(),
        DecodeError::PayloadLength {
            codec: "3lc",
            elements: 100,
            expected: 20,
            actual: 1
        }
    );
    // More bytes than quartic bytes is a length error too.
    assert!(matches!(
        parse(&three_lc(100, vec![121; 21]).bytes()),
        Err(DecodeError::PayloadLength { actual: 21, .. })
    ));
    // An empty tensor has an empty payload.
    assert!(matches!(
        parse(&three_lc(0, vec![255]).bytes()),
        Err(DecodeError::PayloadLength { .. })
    ));
    assert_eq!(
        decoded(&three_lc(0, vec![]).bytes()).unwrap(),
        Vec::<f32>::new()
    );
}

#[test]
fn payload_length_larger_than_the_buffer() {
    let mut frame = three_lc(100, vec![255, 247]);
    frame.payload_len = Some(3);
    let bytes = frame.bytes();
    assert_eq!(
        parse(&bytes).unwrap_err(),
        DecodeError::Truncated {
            needed: 21 + 8 + 3 + 4,
            available: bytes.len()
        }
    );
    frame.payload_len = Some(u32::MAX);
    let bytes = frame.bytes();
    assert_eq!(
        parse(&bytes).unwrap_err(),
        DecodeError::Truncated {
            needed: 21 + 8 + u64::from(u32::MAX) + 4,
            available: bytes.len()
        }
    );
}

#[test]
fn wrong_checksum() {
    for (label, mut bytes) in valid_frames() {
        let body = bytes.len() - 4;
        let computed = crc32c::crc32c(&bytes[..body]);
        bytes[body] ^= 0x01;
        let stored = u32::from_le_bytes(bytes[body..].try_into().unwrap());
        assert_eq!(
            parse(&bytes).unwrap_err(),
            DecodeError::Checksum { stored, computed },
            "{label}"
        );
        // A payload byte changed under a stale checksum.
        bytes[body] ^= 0x01;
        bytes[body - 1] ^= 0x40;
        assert!(
            matches!(parse(&bytes), Err(DecodeError::Checksum { .. })),
            "{label}"
        );
    }
}

#[test]
fn truncated_at_every_length() {
    for (label, bytes) in valid_frames() {
        for len in 0..bytes.len() {
            let needed = if len < 21 { 21 } else { bytes.len() as u64 };
            assert_eq!(
                parse(&bytes[..len]).unwrap_err(),
                DecodeError::Truncated {
                    needed,
                    available: len
                },
                "{label} cut at {len}"
            );
        }
        assert!(parse(&bytes).is_ok());
    }
}

#[test]
fn bad_magic() {
    for magic in [*b"TLCG", *b"tlcf", [0; 4], *b"PK\x03\x04"] {
        let frame = valid_with(|f| f.magic = magic);
        assert_eq!(parse_error(&frame), DecodeError::BadMagic(magic));
    }
}

#[test]
fn bad_version() {
    for version in [0, 2, 255] {
        let frame = valid_with(|f| f.version = version);
        assert_eq!(
            parse_error(&frame),
            DecodeError::UnsupportedVersion(version)
        );
    }
}

#[test]
fn unknown_codec_id() {
    for codec in [9, 10, 127, 255] {
        let frame = RawFrame::new(codec, 0, vec![], vec![]);
        assert_eq!(parse_error(&frame), DecodeError::UnknownCodec(codec));
    }
}

#[test]
fn bad_dtype() {
    // 0 = DT_INVALID, 2 = DT_DOUBLE, 14 = DT_BFLOAT16, 19 = DT_HALF.
    for dtype in [0, 2, 14, 19, 255] {
        let mut frame = RawFrame::new(NONE, 1, vec![], vec![0; 4]);
        frame.dtype = dtype;
        assert_eq!(parse_error(&frame), DecodeError::UnsupportedDtype(dtype));
    }
}

#[test]
fn reserved_flags() {
    for flags in [0x04, 0x06, 0x80, 0xff] {
        let frame = valid_with(|f| f.flags = flags);
        assert_eq!(parse_error(&frame), DecodeError::ReservedFlags(flags));
    }
    let frame = valid_with(|f| f.flags = 0x01);
    assert!(parse(&frame.bytes()).unwrap().header.feedback);
}

#[test]
fn nan_negative_and_infinite_scales() {
    for bad in [
        f32::NAN,
        -1.0,
        -f32::MIN_POSITIVE,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ] {
        let frame = RawFrame::new(THREELC, 7, params2(bad, 1.0), vec![202, 94]);
        assert!(bad_params(&frame.bytes()).contains("3lc scale"), "{bad}");
        let frame = RawFrame::new(INT8, 1, bad.to_le_bytes().to_vec(), vec![1]);
        assert!(bad_params(&frame.bytes()).contains("int8 step"), "{bad}");
        let frame = RawFrame::new(TERNGRAD, 1, bad.to_le_bytes().to_vec(), vec![121]);
        assert!(
            bad_params(&frame.bytes()).contains("terngrad scale"),
            "{bad}"
        );
    }
    // onebit: the positive mean must be >= 0 and the negative one <= 0.
    for (pos, neg) in [
        (-1.0, -1.0),
        (1.0, 1.0),
        (f32::NAN, -1.0),
        (1.0, f32::NEG_INFINITY),
    ] {
        let frame = RawFrame::new(ONEBIT, 8, params2(pos, neg), vec![0x0f]);
        assert!(
            bad_params(&frame.bytes()).contains("onebit means"),
            "{pos} {neg}"
        );
    }
    // -0.0 and 0.0 are valid scales (an all-zero tensor).
    let frame = RawFrame::new(THREELC, 7, params2(-0.0, 1.0), vec![243]);
    assert!(parse(&frame.bytes()).is_ok());
}

#[test]
fn sparsity_out_of_range_in_params() {
    for s in [2.0, 0.999, 0.0, -1.5, f32::NAN, f32::INFINITY] {
        let frame = RawFrame::new(THREELC, 7, params2(1.0, s), vec![202, 94]);
        assert!(bad_params(&frame.bytes()).contains("3lc sparsity"), "{s}");
    }
    let frame = RawFrame::new(THREELC, 7, params2(1.0, 1.999), vec![202, 94]);
    assert!(parse(&frame.bytes()).is_ok());
}

fn topk_params(percent: f32, kept: u32) -> Vec<u8> {
    let mut p = percent.to_le_bytes().to_vec();
    p.extend_from_slice(&kept.to_le_bytes());
    p
}

#[test]
fn topk_kept_more_than_elements() {
    let frame = RawFrame::new(TOPK, 4, topk_params(25.0, 5), vec![0x0f; 1 + 20]);
    assert!(bad_params(&frame.bytes()).contains("keeps 5 of 4"));
    let frame = RawFrame::new(TOPK, 4, topk_params(25.0, u32::MAX), vec![0x0f]);
    assert!(bad_params(&frame.bytes()).contains("keeps"));
    for percent in [0.0, -1.0, 100.5, f32::NAN] {
        let frame = RawFrame::new(TOPK, 4, topk_params(percent, 1), vec![1, 0, 0, 0x80, 0x3f]);
        assert!(
            bad_params(&frame.bytes()).contains("topk share"),
            "{percent}"
        );
    }
}

#[test]
fn topk_bitmap_disagrees_with_the_count() {
    // 16 values, 2 kept, but three bits set.
    let mut payload = vec![0b0000_0111, 0];
    payload.extend_from_slice(&params2(1.0, 2.0));
    let frame = RawFrame::new(TOPK, 16, topk_params(25.0, 2), payload.clone());
    assert_eq!(
        corrupt(&frame.bytes()),
        "topk bitmap disagrees with the value count"
    );
    // One bit set for two values.
    payload[0] = 0b0001_0000;
    let frame = RawFrame::new(TOPK, 16, topk_params(25.0, 2), payload.clone());
    assert_eq!(
        corrupt(&frame.bytes()),
        "topk bitmap disagrees with the value count"
    );
    // Right count: decodes.
    payload[0] = 0b0001_0001;
    let frame = RawFrame::new(TOPK, 16, topk_params(25.0, 2), payload);
    let values = decoded(&frame.bytes()).unwrap();
    assert_eq!((values[0], values[4]), (1.0, 2.0));
    // Padding bits of a 12-value bitmap.
    let mut payload = vec![0, 0b0001_0000];
    payload.extend_from_slice(&1.0f32.to_le_bytes());
    let frame = RawFrame::new(TOPK, 12, topk_params(25.0, 1), payload);
    assert_eq!(corrupt(&frame.bytes()), "bitmap padding bits set");
    // A kept value that is not finite.
    let mut payload = vec![1];
    payload.extend_from_slice(&f32::NAN.to_le_bytes());
    let frame = RawFrame::new(TOPK, 3, topk_params(25.0, 1), payload);
    assert_eq!(corrupt(&frame.bytes()), "non-finite topk value");
}

#[test]
fn onebit_bitmap_padding_bits_set() {
    // 10 values: 2 bytes, bits 10..16 of the second are padding.
    for last in [0b0000_0100, 0b1000_0000, 0xfc] {
        let frame = RawFrame::new(ONEBIT, 10, params2(1.0, -1.0), vec![0xff, last]);
        assert_eq!(corrupt(&frame.bytes()), "bitmap padding bits set");
    }
    let frame = RawFrame::new(ONEBIT, 10, params2(1.0, -1.0), vec![0xff, 0b10]);
    let values = decoded(&frame.bytes()).unwrap();
    assert_eq!(values[8..], [-1.0, 1.0]);
}

#[test]
fn int8_level_minus_128() {
    let frame = RawFrame::new(INT8, 3, 1.0f32.to_le_bytes().to_vec(), vec![0, 0x80, 1]);
    assert_eq!(corrupt(&frame.bytes()), "int8 level -128 is not used");
}

/// An int8-rows payload: per row its step, then its levels.
fn int8_rows_payload(rows: &[(f32, &[u8])]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (step, levels) in rows {
        payload.extend_from_slice(&step.to_le_bytes());
        payload.extend_from_slice(levels);
    }
    payload
}

#[test]
fn int8_rows_refuses_a_bad_row_length_step_level_or_length() {
    let row_len = |n: u32| n.to_le_bytes().to_vec();
    let frame = RawFrame::new(
        INT8_ROWS,
        2,
        row_len(0),
        int8_rows_payload(&[(1.0, &[1, 2])]),
    );
    assert!(bad_params(&frame.bytes()).contains("row length 0"));
    for bad in [f32::NAN, -1.0, f32::INFINITY, f32::MAX] {
        let payload = int8_rows_payload(&[(1.0, &[1, 2]), (bad, &[3])]);
        let frame = RawFrame::new(INT8_ROWS, 3, row_len(2), payload);
        assert!(corrupt(&frame.bytes()).contains("int8-rows step"), "{bad}");
    }
    let payload = int8_rows_payload(&[(1.0, &[1, 0x80])]);
    let frame = RawFrame::new(INT8_ROWS, 2, row_len(2), payload);
    assert_eq!(corrupt(&frame.bytes()), "int8 level -128 is not used");
    // One step short of the three rows 5 values in rows of 2 need.
    let payload = int8_rows_payload(&[(1.0, &[1, 2]), (1.0, &[3, 4, 5])]);
    let frame = RawFrame::new(INT8_ROWS, 5, row_len(2), payload);
    assert!(matches!(
        parse(&frame.bytes()),
        Err(DecodeError::PayloadLength { .. })
    ));
    // Each row decodes with its own step.
    let payload = int8_rows_payload(&[(0.5, &[2, 0xff]), (4.0, &[1])]);
    let frame = RawFrame::new(INT8_ROWS, 3, row_len(2), payload);
    assert_eq!(decoded(&frame.bytes()).unwrap(), vec![1.0, -0.5, 4.0]);
}

#[test]
fn non_finite_16_bit_values() {
    // fp16 NaN, +inf, -inf; bf16 NaN, +inf.
    for (codec, word) in [
        (FP16, 0x7e00u16),
        (FP16, 0x7c00),
        (FP16, 0xfc00),
        (BF16, 0x7fc0),
        (BF16, 0x7f80),
    ] {
        let mut payload = 0x3c00u16.to_le_bytes().to_vec();
        payload.extend_from_slice(&word.to_le_bytes());
        let frame = RawFrame::new(codec, 2, vec![], payload);
        assert_eq!(corrupt(&frame.bytes()), "non-finite 16-bit value");
    }
    // The largest finite values are fine.
    let frame = RawFrame::new(FP16, 1, vec![], 0x7bffu16.to_le_bytes().to_vec());
    assert_eq!(decoded(&frame.bytes()).unwrap(), [65504.0]);
}

#[test]
fn quartic_bytes_above_242() {
    for byte in 243..=255u8 {
        // n = 10: L = 2, both bytes inside the tensor.
        let frame = RawFrame::new(TERNGRAD, 10, 1.0f32.to_le_bytes().to_vec(), vec![121, byte]);
        assert_eq!(corrupt(&frame.bytes()), "quartic byte above 242");
    }
}

#[test]
fn non_zero_digits_in_padding() {
    // n = 1: digits 2..5 of the only byte are padding and must be 1 (zero trit).
    for codec in [TERNGRAD, THREELC] {
        let params = if codec == THREELC {
            params2(1.0, 1.0)
        } else {
            1.0f32.to_le_bytes().to_vec()
        };
        let ok = RawFrame::new(codec, 1, params.clone(), vec![2 * 81 + 40]);
        assert_eq!(decoded(&ok.bytes()).unwrap(), [1.0]);
        for byte in [2 * 81 + 41, 0, 242, 81 + 39] {
            let frame = RawFrame::new(codec, 1, params.clone(), vec![byte]);
            assert_eq!(corrupt(&frame.bytes()), "non-zero digit in padding");
        }
    }
    // n = 7: L = 2, the second byte's last two digits are padding.
    let frame = three_lc(7, vec![121, 95]);
    assert_eq!(corrupt(&frame.bytes()), "non-zero digit in padding");
}

#[test]
fn params_len_mismatch() {
    for (codec, wire_len, wrong) in [
        (THREELC, 8u8, 4u8),
        (THREELC, 8, 0),
        (NONE, 0, 8),
        (INT8, 4, 8),
        (TOPK, 8, 255),
    ] {
        let mut frame = RawFrame::new(codec, 0, vec![0; usize::from(wire_len)], vec![]);
        frame.params_len = Some(wrong);
        let why = bad_params(&frame.bytes());
        assert!(
            why.contains(&format!(
                "takes {wire_len} parameter bytes, frame has {wrong}"
            )),
            "{why}"
        );
    }
}

#[test]
fn payload_length_that_does_not_fit_the_codec() {
    for (codec, params, elements, payload_len, expected) in [
        (NONE, vec![], 3, 11, 12),
        (FP16, vec![], 3, 7, 6),
        (BF16, vec![], 3, 5, 6),
        (INT8, vec![0; 4], 3, 4, 3),
        (TERNGRAD, vec![0; 4], 11, 2, 3),
        (ONEBIT, vec![0; 8], 9, 1, 2),
        (TOPK, topk_params(50.0, 1), 9, 2, 6),
    ] {
        let frame = RawFrame::new(codec, elements, params, vec![0; payload_len]);
        match parse(&frame.bytes()) {
            Err(DecodeError::PayloadLength {
                expected: e,
                actual,
                ..
            }) => {
                assert_eq!((e, actual), (expected, payload_len as u64), "codec {codec}");
            }
            other => panic!("codec {codec}: {other:?}"),
        }
    }
}

#[test]
fn output_of_the_wrong_length() {
    let bytes = three_lc(7, vec![202, 94]).bytes();
    let frame = parse(&bytes).unwrap();
    let mut out = vec![0f32; 6];
    assert_eq!(
        frame.decode_into(&mut out).unwrap_err(),
        DecodeError::OutputLength {
            expected: 7,
            actual: 6
        }
    );
}

#[test]
fn concatenated_frames_and_trailing_garbage() {
    let mut stream = Vec::new();
    let mut encoder = Encoder::new(threelc(1.5), Feedback::On);
    for t in 0..3 {
        encoder.encode(&gradient(40, t), &mut stream).unwrap();
    }
    stream.extend_from_slice(b"TLCF\x01"); // the start of a fourth frame
    let mut at = 0;
    let mut frames = 0;
    let err = loop {
        match parse(&stream[at..]) {
            Ok(frame) => {
                at += frame.header.frame_len();
                frames += 1;
            }
            Err(err) => break err,
        }
    };
    assert_eq!(frames, 3);
    assert_eq!(
        err,
        DecodeError::Truncated {
            needed: 21,
            available: 5
        }
    );
}

#[test]
fn int8_step_that_overflows_is_refused() {
    // A peer's bytes must never reach TensorFlow as non-finite data; fp16,
    // bf16 and topk refuse non-finite values, int8 does not.
    let frame = RawFrame::new(INT8, 2, f32::MAX.to_le_bytes().to_vec(), vec![127, 0x81]);
    match decoded(&frame.bytes()) {
        Ok(values) => assert!(values.iter().all(|v| v.is_finite()), "{values:?}"),
        Err(DecodeError::BadParams(_) | DecodeError::CorruptPayload(_)) => {}
        Err(other) => panic!("{other:?}"),
    }
}

#[test]
fn encoder_frames_use_the_wire_ids_written_here() {
    for (id, codec) in [
        (NONE, Codec::None),
        (FP16, Codec::Fp16),
        (BF16, Codec::Bf16),
        (INT8, Codec::Int8),
        (TERNGRAD, Codec::TernGrad { seed: 0 }),
        (ONEBIT, Codec::OneBit),
        (TOPK, topk(25.0)),
        (THREELC, threelc(1.0)),
    ] {
        let bytes = encode_one(&mut Encoder::new(codec, Feedback::Off), &[1.0, -2.0]);
        assert_eq!(bytes[5], id, "{codec}");
    }
}
