//! `terngrad`: stochastic 3-value quantization (Wen et al., NeurIPS 2017),
//! packed with quartic encoding ("Stoch 3-value + QE" in the 3LC paper).
//!
//! A value `a` becomes `sign(a) * max|acc|` with probability `|a| / max|acc|`
//! and 0 otherwise, so its expectation is `a`. The random draw for a value
//! depends only on the stream key and its position, so frames are
//! reproducible from the seed whatever order the values are visited in.

use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;
use crate::quartic::{self, Layout};

/// SplitMix64's output function: a fast, well-mixed 64-bit hash.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random stream key for the `frame`-th tensor of an encoder seeded with `seed`.
pub fn stream_key(seed: u64, frame: u64) -> u64 {
    mix64(seed ^ mix64(frame.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// A uniform draw in [0, 1) for position `i` of a stream.
#[inline(always)]
fn uniform(key: u64, i: usize) -> f32 {
    let bits = mix64(key.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    // 24 random bits: exactly representable in f32.
    (bits >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// Appends `ceil(n/5)` quartic bytes of stochastic trits.
pub fn encode(
    mut acc: Accumulator<'_>,
    key: u64,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    let scale = acc.max_abs()?;
    let layout = Layout::new(acc.len());
    let start = out.len();
    out.resize(start + layout.len, 0);
    quartic::pack(layout, &mut out[start..], |i| {
        let a = acc.get(i);
        let q = if uniform(key, i) * scale < a.abs() {
            if a > 0.0 {
                1
            } else {
                -1
            }
        } else {
            0
        };
        acc.settle(i, f32::from(q) * scale);
        q
    });
    Ok(Params::TernGrad { scale })
}

/// `x' = scale * q`.
pub fn decode(scale: f32, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    quartic::unpack(payload, [-scale, 0.0, scale], out)
}
