//! The worked example in codec/FORMAT.md, byte for byte.

use tlc_codec::{Codec, Encoder, Feedback, Sparsity};

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
