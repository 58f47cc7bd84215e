//! Helpers shared by the integration tests: the codec settings under test,
//! deterministic inputs, a from-scratch reference of 3LC as DESIGN.md
//! ("3LC, exactly") specifies it, and a frame builder that writes the header
//! layout of `src/frame.rs` by hand (with a correct CRC32C) so hostile frames
//! get past the checksum.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use tlc_codec::{
    decode, Codec, DecodeError, Encoder, Feedback, Frame, Limits, Sparsity, TopKPercent,
};

/// A small element limit, so hostile frames cannot make tests allocate much.
pub const LIMITS: Limits = Limits {
    max_elements: 1 << 16,
};

/// 3LC with sparsity `s`.
pub fn threelc(s: f32) -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::new(s).unwrap(),
    }
}

/// Top-k keeping `percent`%.
pub fn topk(percent: f32) -> Codec {
    Codec::TopK {
        percent: TopKPercent::new(percent).unwrap(),
    }
}

/// Every codec and setting the suite covers, with a label for messages.
pub fn codecs() -> Vec<(&'static str, Codec)> {
    vec![
        ("none", Codec::None),
        ("fp16", Codec::Fp16),
        ("bf16", Codec::Bf16),
        ("int8", Codec::Int8),
        ("terngrad", Codec::TernGrad { seed: 7 }),
        ("onebit", Codec::OneBit),
        ("topk25", topk(25.0)),
        ("topk5", topk(5.0)),
        ("3lc_s1.0", threelc(1.0)),
        ("3lc_s1.5", threelc(1.5)),
        ("3lc_s1.75", threelc(1.75)),
        ("3lc_s1.9", threelc(1.9)),
    ]
}

/// Tensor lengths around the quartic (5) and zero-run (14 bytes = 70
/// values) boundaries, and around the bitmap byte (8).
pub const LENGTHS: &[usize] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16, 17, 69, 70, 71, 75, 76, 139, 140, 141, 1000,
];

/// Deterministic, exactly representable, heavy-tailed input with zeros:
/// `k^3 / 4096` for `k` in -11..=11, and 0 at about 3 of 7 positions.
/// Every value is a small dyadic rational, so other languages reproduce it
/// bit for bit (see `testdata/vectors/check_vectors.py`).
pub fn formula(n: usize, t: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            if (i * 5 + t * 3) % 7 < 3 {
                0.0
            } else {
                let k = ((i * 37 + t * 11 + 5) % 23) as i32 - 11;
                (k * k * k) as f32 / 4096.0
            }
        })
        .collect()
}

/// Like [`formula`] but mostly zero: non-zero only at some positions whose
/// index modulo 31 is below 8, so 3LC payloads have long zero runs.
pub fn sparse_formula(n: usize, t: usize) -> Vec<f32> {
    let dense = formula(n, t);
    (0..n)
        .map(|i| {
            if i % 31 < 8 && (i * 13 + t * 7) % 5 != 0 {
                dense[i]
            } else {
                0.0
            }
        })
        .collect()
}

/// A pseudo-random gradient-like tensor (xorshift, cube of a centred uniform).
pub fn gradient(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let c = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            c * c * c * 0.01
        })
        .collect()
}

/// What the encoder quantizes: `x + e` (f32) with feedback, `x` without.
/// A residual of another length is the one a shape change replaces by zeros
/// (and `-0.0 + 0.0` is `+0.0`, so the zeros still count).
pub fn accumulate(x: &[f32], residual: &[f32], feedback: Feedback) -> Vec<f32> {
    match feedback {
        Feedback::Off => x.to_vec(),
        Feedback::On if residual.len() == x.len() => {
            x.iter().zip(residual).map(|(x, e)| x + e).collect()
        }
        Feedback::On => x.iter().map(|x| x + 0.0).collect(),
    }
}

/// Encodes one tensor into a fresh buffer.
pub fn encode_one(encoder: &mut Encoder, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    encoder.encode(x, &mut out).unwrap();
    out
}

/// Decodes one frame (under [`LIMITS`]) that must be valid.
pub fn decode_one(bytes: &[u8]) -> (Vec<f32>, Frame<'_>) {
    let mut out = Vec::new();
    let frame = decode(bytes, &LIMITS, &mut out).unwrap();
    assert_eq!(out.len() as u64, frame.header.elements);
    (out, frame)
}

/// Decodes `bytes` whole (under [`LIMITS`]): the values, or why not.
pub fn decoded(bytes: &[u8]) -> Result<Vec<f32>, DecodeError> {
    let mut out = Vec::new();
    decode(bytes, &LIMITS, &mut out).map(|_| out)
}

/// Raw bits, to compare floats exactly (0.0 vs -0.0, NaN).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

/// Little-endian bytes of a float slice, as stored in `testdata`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Floats from little-endian bytes.
pub fn f32_from_bytes(b: &[u8]) -> Vec<f32> {
    assert_eq!(b.len() % 4, 0);
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A frame written field by field. `bytes()` computes the CRC32C over
/// everything before it, so only the field a test changes is wrong.
#[derive(Debug, Clone)]
pub struct RawFrame {
    pub magic: [u8; 4],
    pub version: u8,
    pub codec: u8,
    pub dtype: u8,
    pub flags: u8,
    pub elements: u64,
    /// `None`: the real payload length.
    pub payload_len: Option<u32>,
    /// `None`: the real parameter length.
    pub params_len: Option<u8>,
    pub params: Vec<u8>,
    pub payload: Vec<u8>,
}

impl RawFrame {
    /// A well-formed frame of codec `codec` (wire id) holding `elements` values.
    pub fn new(codec: u8, elements: u64, params: Vec<u8>, payload: Vec<u8>) -> RawFrame {
        RawFrame {
            magic: *b"TLCF",
            version: 1,
            codec,
            dtype: 1,
            flags: 0,
            elements,
            payload_len: None,
            params_len: None,
            params,
            payload,
        }
    }

    /// Header, parameters and payload, without the checksum.
    pub fn body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.magic);
        b.push(self.version);
        b.push(self.codec);
        b.push(self.dtype);
        b.push(self.flags);
        b.extend_from_slice(&self.elements.to_le_bytes());
        let payload_len = self.payload_len.unwrap_or(self.payload.len() as u32);
        b.extend_from_slice(&payload_len.to_le_bytes());
        b.push(self.params_len.unwrap_or(self.params.len() as u8));
        b.extend_from_slice(&self.params);
        b.extend_from_slice(&self.payload);
        b
    }

    /// The whole frame with a correct CRC32C trailer.
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = self.body();
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Two little-endian f32 parameters.
pub fn params2(a: f32, b: f32) -> Vec<u8> {
    let mut p = a.to_le_bytes().to_vec();
    p.extend_from_slice(&b.to_le_bytes());
    p
}

/// 3LC written from DESIGN.md ("3LC, exactly"), one step at a time, with no
/// code shared with the library.
pub mod reference {
    /// Steps 1–4: updates `e` (empty: no feedback) and returns `M` and the trits.
    pub fn quantize(x: &[f32], e: &mut [f32], s: f32) -> (f32, Vec<i8>) {
        let acc: Vec<f32> = if e.is_empty() {
            x.to_vec()
        } else {
            x.iter().zip(e.iter()).map(|(x, e)| e + x).collect()
        };
        let mut max = 0f32;
        for a in &acc {
            if a.abs() > max {
                max = a.abs();
            }
        }
        let m = max * s;
        let q: Vec<i8> = acc
            .iter()
            .map(|&a| {
                if m == 0.0 {
                    0
                } else {
                    let r = (a / m).round_ties_even();
                    assert!((-1.0..=1.0).contains(&r));
                    r as i8
                }
            })
            .collect();
        if !e.is_empty() {
            for i in 0..x.len() {
                e[i] = acc[i] - m * f32::from(q[i]);
            }
        }
        (m, q)
    }

    /// Step 5: quartic bytes of five partitions of `ceil(n / 5)`.
    pub fn quartic(q: &[i8]) -> Vec<u8> {
        let l = q.len().div_ceil(5);
        let mut t: Vec<u8> = q.iter().map(|&q| (q + 1) as u8).collect();
        t.resize(5 * l, 1);
        (0..l)
            .map(|i| 81 * t[i] + 27 * t[l + i] + 9 * t[2 * l + i] + 3 * t[3 * l + i] + t[4 * l + i])
            .collect()
    }

    /// The inverse of [`quartic`] for `n` trits (padding ignored).
    pub fn unquartic(bytes: &[u8], n: usize) -> Vec<i8> {
        let l = bytes.len();
        assert_eq!(l, n.div_ceil(5));
        let mut t = vec![0u8; 5 * l];
        for (i, &b) in bytes.iter().enumerate() {
            assert!(b <= 242);
            t[i] = b / 81;
            t[l + i] = b / 27 % 3;
            t[2 * l + i] = b / 9 % 3;
            t[3 * l + i] = b / 3 % 3;
            t[4 * l + i] = b % 3;
        }
        t[..n].iter().map(|&t| t as i8 - 1).collect()
    }

    /// Step 6: runs of 121 cut greedily into pieces of 14 from the front.
    pub fn zero_run(bytes: &[u8]) -> Vec<u8> {
        zero_run_with(bytes, |k| k.min(14))
    }

    /// Step 6 with the cut left to `piece`: given the run left (`k` bytes
    /// of 121), it returns the next piece's length, in `1..=k.min(14)`.
    /// Any such choice is a valid encoding; the greedy one is canonical.
    pub fn zero_run_with(bytes: &[u8], mut piece: impl FnMut(usize) -> usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != 121 {
                out.push(bytes[i]);
                i += 1;
                continue;
            }
            let mut k = bytes[i..].iter().take_while(|&&b| b == 121).count();
            i += k;
            while k > 0 {
                let p = piece(k);
                out.push(if p == 1 { 121 } else { 243 + (p - 2) as u8 });
                k -= p;
            }
        }
        out
    }

    /// Step 6 backwards.
    pub fn expand(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in bytes {
            if b >= 243 {
                out.extend(std::iter::repeat_n(121, usize::from(b - 243) + 2));
            } else {
                out.push(b);
            }
        }
        out
    }

    /// Steps 1–6 for one tensor: `M` and the payload.
    pub fn encode(x: &[f32], e: &mut [f32], s: f32) -> (f32, Vec<u8>) {
        let (m, q) = quantize(x, e, s);
        (m, zero_run(&quartic(&q)))
    }

    /// Step 7 on a payload: `x' = M * q`.
    pub fn decode(m: f32, payload: &[u8], n: usize) -> Vec<f32> {
        unquartic(&expand(payload), n)
            .into_iter()
            .map(|q| m * f32::from(q))
            .collect()
    }

    /// A whole 3LC frame as `src/frame.rs` lays it out.
    pub fn frame(x: &[f32], e: &mut [f32], s: f32) -> Vec<u8> {
        let feedback = !e.is_empty();
        let (m, payload) = encode(x, e, s);
        let mut frame = super::RawFrame::new(7, x.len() as u64, super::params2(m, s), payload);
        frame.flags = u8::from(feedback);
        frame.bytes()
    }
}
