//! `onebit`: 1-bit quantization with minimum squared quantization error
//! (Seide et al., 2014; "MQE 1-bit int" in the 3LC paper). Each value sends
//! its sign; the receiver substitutes the mean of the non-negative or of the
//! negative values, which minimizes the squared error for that split. Meant
//! to run with error feedback.

use crate::bitmap;
use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;

/// Appends a bitmap: bit set for `acc >= 0`.
pub fn encode(mut acc: Accumulator<'_>, out: &mut Vec<u8>) -> Result<Params, EncodeError> {
    acc.max_abs()?;
    let (mut sum_pos, mut n_pos, mut sum_neg, mut n_neg) = (0f64, 0u64, 0f64, 0u64);
    for i in 0..acc.len() {
        let a = acc.get(i);
        if a >= 0.0 {
            sum_pos += f64::from(a);
            n_pos += 1;
        } else {
            sum_neg += f64::from(a);
            n_neg += 1;
        }
    }
    let mean = |sum: f64, count: u64| {
        if count == 0 {
            0.0
        } else {
            (sum / count as f64) as f32
        }
    };
    let (positive, negative) = (mean(sum_pos, n_pos), mean(sum_neg, n_neg));
    let n = acc.len();
    let start = out.len();
    out.resize(start + bitmap::len(n), 0);
    bitmap::pack(n, &mut out[start..], |i| {
        let non_negative = acc.get(i) >= 0.0;
        acc.settle(i, if non_negative { positive } else { negative });
        non_negative
    });
    Ok(Params::OneBit { positive, negative })
}

/// A set bit decodes to `positive`, a clear one to `negative`.
pub fn decode(
    positive: f32,
    negative: f32,
    payload: &[u8],
    out: &mut [f32],
) -> Result<(), DecodeError> {
    bitmap::check(out.len(), payload)?;
    for (i, v) in out.iter_mut().enumerate() {
        *v = if bitmap::get(payload, i) {
            positive
        } else {
            negative
        };
    }
    Ok(())
}
