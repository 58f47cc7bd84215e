//! The worked examples in codec/FORMAT.md, byte for byte.

use tlc_codec::{decode, Codec, Encoder, Feedback, Frame, Limits, Sparsity};

#[test]
fn format_md_example_frame() {
    let mut encoder = Encoder::new(
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        },
        Feedback::Off,
    );
    let mut frame = Vec::new();
    encoder
        .encode(&[1.0, 0.5, -0.5, -1.0, 0.25, 0.0, 0.0], &mut frame)
        .unwrap();
    let expected: [u8; 35] = [
        0x54, 0x4c, 0x43, 0x46, 0x01, 0x07, 0x01, 0x00, // magic, version, 3lc, f32, flags
        0x07, 0, 0, 0, 0, 0, 0, 0, // n = 7
        0x02, 0, 0, 0,    // payload length
        0x08, // params length
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, // M = 1.0, s = 1.0
        0xca, 0x5e, // payload
        0x4e, 0x43, 0x7c, 0xdc, // CRC-32C
    ];
    assert_eq!(frame, expected);
}

/// The second example: the entropy stage, a hand-written zstd frame with
/// one RLE block (an encoder may write any valid zstd frames).
#[test]
fn format_md_entropy_example() {
    let frame: [u8; 47] = [
        0x54, 0x4c, 0x43, 0x46, 0x01, 0x07, 0x01, 0x02, // magic, version, 3lc, f32, flags
        0x58, 0x1b, 0, 0, 0, 0, 0, 0, // n = 7000
        0x0e, 0, 0, 0,    // P = 14
        0x08, // K = 8
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, // M = 0.0, s = 1.0
        0x64, 0, 0, 0, // raw_len = 100
        0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x64, // zstd magic, header, content size 100
        0x23, 0x03, 0x00, 0xff, // last block, RLE, 100 times 0xff
        0xa3, 0x6c, 0xd3, 0x95, // CRC-32C
    ];
    assert_eq!(crc32c::crc32c(&frame[..43]).to_le_bytes(), frame[43..]);
    let limits = Limits::default();
    let parsed = Frame::parse(&frame, &limits).unwrap();
    assert_eq!(parsed.header.raw_len, Some(100));
    assert_eq!(parsed.header.payload_len, 14);
    assert_eq!(parsed.codec_payload().unwrap(), vec![255u8; 100]);
    let mut values = Vec::new();
    decode(&frame, &limits, &mut values).unwrap();
    assert_eq!(values, vec![0.0; 7000]);
    // The plain frame of the same tensor carries those 100 bytes as they are.
    let mut encoder = Encoder::new(
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        },
        Feedback::Off,
    );
    let mut plain = Vec::new();
    encoder.encode(&vec![0.0; 7000], &mut plain).unwrap();
    assert_eq!(Frame::parse(&plain, &limits).unwrap().payload, [255u8; 100]);
}
