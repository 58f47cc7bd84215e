//! Checked-in test vectors (`testdata/vectors/`): for each codec setting, a
//! known input, the exact frames one encoder writes for it, and what those
//! frames decode to.
//!
//! `cargo test` re-encodes the inputs and compares byte for byte, and decodes
//! the stored frames and compares bit for bit. `TLC_BLESS=1 cargo test
//! --test vectors` rewrites the files instead; it refuses to write 3LC
//! vectors that disagree with the from-scratch reference of DESIGN.md in
//! `common::reference`. `testdata/vectors/check_vectors.py` checks every
//! stored file against a third, independent implementation in Python.

mod common;

use std::fs;
use std::path::PathBuf;

use common::*;
use tlc_codec::{Codec, Encoder, Feedback, Frame};

/// Tensors per vector, all through one encoder.
const STEPS: usize = 3;

/// One vector: a codec setting and the input it is fed.
struct Vector {
    name: &'static str,
    codec: Codec,
    feedback: Feedback,
    n: usize,
    sparse: bool,
}

fn vectors() -> Vec<Vector> {
    let v = |name, codec, feedback, n, sparse| Vector {
        name,
        codec,
        feedback,
        n,
        sparse,
    };
    use Feedback::{Off, On};
    vec![
        v("none_nofb", Codec::None, Off, 37, false),
        v("fp16_nofb", Codec::Fp16, Off, 37, false),
        v("bf16_nofb", Codec::Bf16, Off, 37, false),
        v("int8_nofb", Codec::Int8, Off, 37, false),
        v("int8_fb", Codec::Int8, On, 37, false),
        v(
            "terngrad_seed7_nofb",
            Codec::TernGrad { seed: 7 },
            Off,
            37,
            false,
        ),
        v(
            "terngrad_seed7_fb",
            Codec::TernGrad { seed: 7 },
            On,
            37,
            false,
        ),
        v("onebit_fb", Codec::OneBit, On, 37, false),
        v("topk_k25_fb", topk(25.0), On, 37, false),
        v("topk_k5_fb", topk(5.0), On, 37, false),
        v("3lc_s1.0_fb", threelc(1.0), On, 37, false),
        v("3lc_s1.0_nofb", threelc(1.0), Off, 37, false),
        v("3lc_s1.5_fb", threelc(1.5), On, 37, false),
        v("3lc_s1.75_fb", threelc(1.75), On, 37, false),
        v("3lc_s1.9_fb", threelc(1.9), On, 37, false),
        v("3lc_s1.0_fb_sparse", threelc(1.0), On, 151, true),
        v("3lc_s1.9_fb_sparse", threelc(1.9), On, 151, true),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/vectors")
}

fn path(v: &Vector, ext: &str) -> PathBuf {
    dir().join(format!("{}.{ext}", v.name))
}

fn inputs(v: &Vector) -> Vec<Vec<f32>> {
    (0..STEPS)
        .map(|t| {
            if v.sparse {
                sparse_formula(v.n, t)
            } else {
                formula(v.n, t)
            }
        })
        .collect()
}

/// The frames and decoded values the library produces for `xs`.
fn encode_all(v: &Vector, xs: &[Vec<f32>]) -> (Vec<u8>, Vec<f32>) {
    let mut encoder = Encoder::new(v.codec, v.feedback);
    let mut frames = Vec::new();
    let mut decoded = Vec::new();
    for x in xs {
        let start = frames.len();
        encoder.encode(x, &mut frames).unwrap();
        decoded.extend(decode_one(&frames[start..]).0);
    }
    (frames, decoded)
}

/// The frames of the DESIGN.md reference for a 3LC vector.
fn reference_frames(s: f32, feedback: Feedback, xs: &[Vec<f32>]) -> (Vec<u8>, Vec<f32>) {
    let mut e = match feedback {
        Feedback::On => vec![0f32; xs[0].len()],
        Feedback::Off => Vec::new(),
    };
    let mut frames = Vec::new();
    let mut decoded = Vec::new();
    for x in xs {
        let frame = reference::frame(x, &mut e, s);
        // Header 21 + params 8; scale first; payload up to the CRC.
        let m = f32::from_le_bytes(frame[21..25].try_into().unwrap());
        decoded.extend(reference::decode(m, &frame[29..frame.len() - 4], x.len()));
        frames.extend(frame);
    }
    (frames, decoded)
}

/// Splits concatenated frames.
fn split_frames(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let len = Frame::parse(bytes, &LIMITS).unwrap().header.frame_len();
        frames.push(&bytes[..len]);
        bytes = &bytes[len..];
    }
    frames
}

fn read(v: &Vector, ext: &str) -> Vec<u8> {
    let p = path(v, ext);
    fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run `TLC_BLESS=1 cargo test -p tlc-codec --test vectors` to write it)",
            p.display()
        )
    })
}

#[test]
fn vectors_match_the_checked_in_files() {
    let bless = std::env::var("TLC_BLESS").as_deref() == Ok("1");
    for v in vectors() {
        let xs = inputs(&v);
        let (frames, decoded) = encode_all(&v, &xs);
        if let Codec::ThreeLc { sparsity } = v.codec {
            let (want, want_decoded) = reference_frames(sparsity.get(), v.feedback, &xs);
            assert_eq!(frames, want, "{}: library and reference disagree", v.name);
            assert_eq!(bits(&decoded), bits(&want_decoded), "{}", v.name);
        }
        if bless {
            fs::create_dir_all(dir()).unwrap();
            fs::write(path(&v, "in.f32"), f32_bytes(&xs.concat())).unwrap();
            fs::write(path(&v, "frames"), &frames).unwrap();
            fs::write(path(&v, "out.f32"), f32_bytes(&decoded)).unwrap();
            continue;
        }
        // The stored input is the formula's (so the formula has not drifted)...
        let stored_in = f32_from_bytes(&read(&v, "in.f32"));
        assert_eq!(bits(&stored_in), bits(&xs.concat()), "{}: input", v.name);
        // ...and encodes to the stored frames, byte for byte.
        let stored_xs: Vec<Vec<f32>> = stored_in.chunks(v.n).map(<[f32]>::to_vec).collect();
        let stored_frames = read(&v, "frames");
        let (again, _) = encode_all(&v, &stored_xs);
        assert!(
            again == stored_frames,
            "{}: frames differ from the stored ones",
            v.name
        );
        // The stored frames decode to the stored output, bit for bit.
        let stored_out = f32_from_bytes(&read(&v, "out.f32"));
        let split = split_frames(&stored_frames);
        assert_eq!(split.len(), STEPS, "{}", v.name);
        let mut out = Vec::new();
        for frame in split {
            let (values, parsed) = decode_one(frame);
            assert_eq!(parsed.header.codec(), v.codec.id());
            assert_eq!(parsed.header.feedback, v.feedback == Feedback::On);
            out.extend(values);
        }
        assert_eq!(bits(&out), bits(&stored_out), "{}: decoded output", v.name);
    }
}

#[test]
fn stored_three_lc_vectors_match_the_reference() {
    // Independent of the library: from the stored input, the reference must
    // write the stored frames and decode them to the stored output.
    if std::env::var("TLC_BLESS").as_deref() == Ok("1") {
        return; // the files are being rewritten (checked before writing)
    }
    let mut checked = 0;
    for v in vectors() {
        let Codec::ThreeLc { sparsity } = v.codec else {
            continue;
        };
        let xs: Vec<Vec<f32>> = f32_from_bytes(&read(&v, "in.f32"))
            .chunks(v.n)
            .map(<[f32]>::to_vec)
            .collect();
        let (frames, decoded) = reference_frames(sparsity.get(), v.feedback, &xs);
        assert!(frames == read(&v, "frames"), "{}: frames", v.name);
        assert_eq!(
            bits(&decoded),
            bits(&f32_from_bytes(&read(&v, "out.f32"))),
            "{}",
            v.name
        );
        checked += 1;
    }
    assert_eq!(checked, 7);
}

#[test]
fn sparse_vectors_have_long_zero_runs() {
    // The sparse inputs exist to put runs of more than 14 zero groups on
    // the wire; make sure they still do.
    for v in vectors().into_iter().filter(|v| v.sparse) {
        let (frames, _) = encode_all(&v, &inputs(&v));
        for frame in split_frames(&frames) {
            let parsed = Frame::parse(frame, &LIMITS).unwrap();
            assert!(
                parsed.payload.contains(&255),
                "{}: {:?}",
                v.name,
                parsed.payload
            );
        }
    }
}

/// 3LC by hand, per DESIGN.md and the header layout in `src/frame.rs`.
///
/// x = [1.0, 0.5, -0.5, -1.0, 0.25, 0.0, 0.0], s = 1.0, fresh buffer:
/// - acc = x; M = max|acc| * s = 1.0
/// - q = round_ties_even(acc / M) = [1, 0, 0, -1, 0, 0, 0] (0.5 and -0.5
///   are ties and go to the even 0)
/// - e = acc - M q = [0, 0.5, -0.5, 0, 0.25, 0, 0]
/// - t = q + 1 = [2, 1, 1, 0, 1, 1, 1]; n = 7, L = 2, padded with 1 to 10:
///   p0 = [2, 1], p1 = [1, 0], p2 = [1, 1], p3 = [1, 1], p4 = [1, 1]
/// - b0 = 81*2 + 27*1 + 9*1 + 3*1 + 1 = 202 = 0xca
///   b1 = 81*1 + 27*0 + 9*1 + 3*1 + 1 = 94 = 0x5e
/// - no byte is 121, so zero-run encoding leaves [0xca, 0x5e].
#[test]
fn hand_computed_three_lc_frame() {
    let x = [1.0, 0.5, -0.5, -1.0, 0.25, 0.0, 0.0];
    let mut encoder = Encoder::new(threelc(1.0), Feedback::On);
    let frame = encode_one(&mut encoder, &x);
    #[rustfmt::skip]
    let want: [u8; 35] = [
        b'T', b'L', b'C', b'F', // magic
        0x01,                   // version 1
        0x07,                   // codec 7 = 3lc
        0x01,                   // dtype 1 = f32
        0x01,                   // flags: error feedback
        0x07, 0, 0, 0, 0, 0, 0, 0, // elements = 7 (u64 LE)
        0x02, 0, 0, 0,          // payload length = 2 (u32 LE)
        0x08,                   // parameter bytes = 8
        0x00, 0x00, 0x80, 0x3f, // M = 1.0 (f32 LE)
        0x00, 0x00, 0x80, 0x3f, // s = 1.0 (f32 LE)
        0xca, 0x5e,             // payload
        0xc0, 0x81, 0x33, 0x66, // CRC32C of the 31 bytes above (LE)
    ];
    assert_eq!(frame, want);
    assert_eq!(crc32c::crc32c(&want[..31]), 0x6633_81c0);
    assert_eq!(encoder.residual(), [0.0, 0.5, -0.5, 0.0, 0.25, 0.0, 0.0]);
    let (decoded, _) = decode_one(&frame);
    assert_eq!(decoded, [1.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0]);

    // The next tensor, all zeros, sends the residual: acc = e, M = 0.5,
    // acc / M = [0, 1, -1, 0, 0.5, 0, 0] -> q = [0, 1, -1, 0, 0, 0, 0]
    // (0.5 is a tie again); t = [1, 2, 0, 1, 1, 1, 1 | 1, 1, 1]:
    // b0 = 81*1 + 27*0 + 9 + 3 + 1 = 94, b1 = 81*2 + 27*1 + 9 + 3 + 1 = 202.
    let frame = encode_one(&mut encoder, &[0.0; 7]);
    assert_eq!(frame[21..25], 0.5f32.to_le_bytes());
    assert_eq!(frame[29..31], [94, 202]);
    assert_eq!(encoder.residual(), [0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0]);
}

/// A zero run by hand: 35 values, only x[0] = 1.0, s = 1.5, no feedback.
/// M = 1.5; 1.0 / 1.5 = 0.667 rounds to 1, the rest to 0. n = 35, L = 7:
/// b0 = 81*2 + 27 + 9 + 3 + 1 = 202, b1..b6 = 121 (six zero groups), which
/// zero-run encoding turns into 243 + (6 - 2) = 247.
#[test]
fn hand_computed_three_lc_zero_run() {
    let mut x = [0f32; 35];
    x[0] = 1.0;
    let frame = encode_one(&mut Encoder::new(threelc(1.5), Feedback::Off), &x);
    #[rustfmt::skip]
    let head: [u8; 29] = [
        b'T', b'L', b'C', b'F', 0x01, 0x07, 0x01,
        0x00,                   // flags: no feedback
        35, 0, 0, 0, 0, 0, 0, 0,
        0x02, 0, 0, 0,
        0x08,
        0x00, 0x00, 0xc0, 0x3f, // M = 1.5
        0x00, 0x00, 0xc0, 0x3f, // s = 1.5
    ];
    assert_eq!(frame[..29], head);
    assert_eq!(frame[29..31], [202, 247]);
    assert_eq!(frame.len(), 35);
    let (decoded, _) = decode_one(&frame);
    let mut want = [0f32; 35];
    want[0] = 1.5;
    assert_eq!(decoded, want);
}
