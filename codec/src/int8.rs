//! `int8`: 255 levels in [-127, 127] scaled by `max|x| / 127`.

use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;

/// Appends one signed byte per value.
pub fn encode(mut acc: Accumulator<'_>, out: &mut Vec<u8>) -> Result<Params, EncodeError> {
    let max = acc.max_abs()?;
    let step = max / 127.0;
    // At max = f32::MAX the division rounds up and 127 * step overflows.
    if !(step * 127.0).is_finite() {
        let (index, value) = acc.find_magnitude(max);
        return Err(EncodeError::OutOfRange {
            codec: "int8",
            value,
            index,
        });
    }
    out.reserve(acc.len());
    for i in 0..acc.len() {
        let q = round_level(acc.get(i) / step);
        out.push(q as u8);
        acc.settle(i, f32::from(q) * step);
    }
    Ok(Params::Int8 { step })
}

/// `round_ties_even(v)` clamped to [-127, 127], as an integer.
///
/// Clamping first keeps `|v| <= 127 < 2^22`, where adding and subtracting
/// `1.5 * 2^23` rounds to the nearest integer, ties to even, in the default
/// rounding mode: the same result as `f32::round_ties_even`, without its
/// per-element library call on targets lacking SSE4.1. NaN (0/0 for an
/// all-zero tensor) stays NaN and casts to 0.
#[inline(always)]
fn round_level(v: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    ((v.clamp(-127.0, 127.0) + MAGIC) - MAGIC) as i8
}

/// `x' = q * step`; the unused level -128 is refused.
pub fn decode(step: f32, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    if payload.len() != out.len() {
        return Err(DecodeError::CorruptPayload(
            "int8 payload length does not match tensor",
        ));
    }
    for (v, &b) in out.iter_mut().zip(payload) {
        let q = b as i8;
        if q == i8::MIN {
            return Err(DecodeError::CorruptPayload("int8 level -128 is not used"));
        }
        *v = f32::from(q) * step;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::round_level;

    #[test]
    fn round_level_is_round_ties_even_clamped() {
        let mut v = -140.0f32;
        while v <= 140.0 {
            let want = v.round_ties_even().clamp(-127.0, 127.0) as i8;
            assert_eq!(round_level(v), want, "v = {v}");
            v += 0.125;
        }
        for v in [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -2.5,
            126.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            assert_eq!(
                round_level(v),
                v.round_ties_even().clamp(-127.0, 127.0) as i8,
                "v = {v}"
            );
        }
        assert_eq!(round_level(f32::NAN), 0);
    }
}
