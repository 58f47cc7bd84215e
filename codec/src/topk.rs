//! `topk`: keep the largest `k`% of values by magnitude; the rest stays in
//! the error buffer. The payload is a bitmap of kept positions followed by
//! the kept values as little-endian f32, in position order.
//!
//! The threshold comes from sorting a sample of magnitudes rather than the
//! whole tensor, so the kept share is close to, not exactly, `k`%.

use crate::bitmap;
use crate::codec::TopKPercent;
use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;
use crate::terngrad::mix64;

/// Number of magnitudes sorted to find the threshold.
pub const SAMPLE: usize = 4096;

/// The magnitude at or above which values are kept.
fn threshold(acc: &Accumulator<'_>, percent: TopKPercent, scratch: &mut Vec<f32>) -> f32 {
    let n = acc.len();
    if percent.get() >= 100.0 || n == 0 {
        return 0.0;
    }
    scratch.clear();
    if n <= SAMPLE {
        scratch.extend((0..n).map(|i| acc.get(i).abs()));
    } else {
        // Positions from a fixed hash: reproducible, and blind to any
        // periodic structure a strided sample could alias with.
        scratch.extend((0..SAMPLE).map(|s| acc.get((mix64(s as u64) % n as u64) as usize).abs()));
    }
    let keep = ((scratch.len() as f64 * f64::from(percent.get()) / 100.0).ceil() as usize).max(1);
    let rank = scratch.len() - keep;
    let (_, nth, _) = scratch.select_nth_unstable_by(rank, f32::total_cmp);
    *nth
}

/// Appends the bitmap and the kept values.
pub fn encode(
    mut acc: Accumulator<'_>,
    percent: TopKPercent,
    scratch: &mut Vec<f32>,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    acc.max_abs()?;
    let n = acc.len();
    let thr = threshold(&acc, percent, scratch);
    let start = out.len();
    let values_start = start + bitmap::len(n);
    out.resize(values_start, 0);
    // The bitmap (zeroed by the resize) is filled in place while the kept
    // values are appended after it.
    for i in 0..n {
        let a = acc.get(i);
        let keep = a != 0.0 && a.abs() >= thr;
        if keep {
            out[start + i / 8] |= 1 << (i % 8);
            out.extend_from_slice(&a.to_le_bytes());
        }
        acc.settle(i, if keep { a } else { 0.0 });
    }
    let kept = (out.len() - values_start) / 4;
    let kept = u32::try_from(kept).map_err(|_| EncodeError::TooLarge { elements: n })?;
    Ok(Params::TopK {
        percent: percent.get(),
        kept,
    })
}

/// Scatters the kept values to their positions; the rest are 0.
pub fn decode(kept: u32, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    let n = out.len();
    let (bits, values) =
        payload
            .split_at_checked(bitmap::len(n))
            .ok_or(DecodeError::CorruptPayload(
                "topk payload shorter than its bitmap",
            ))?;
    if bitmap::check(n, bits)? != u64::from(kept) || values.len() as u64 != 4 * u64::from(kept) {
        return Err(DecodeError::CorruptPayload(
            "topk bitmap disagrees with the value count",
        ));
    }
    let mut values = values.chunks_exact(4);
    for (i, v) in out.iter_mut().enumerate() {
        *v = 0.0;
        if bitmap::get(bits, i) {
            let Some(b) = values.next() else {
                return Err(DecodeError::CorruptPayload("topk values run out"));
            };
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if !v.is_finite() {
                return Err(DecodeError::CorruptPayload("non-finite topk value"));
            }
        }
    }
    Ok(())
}
