//! `int8`: 255 levels in [-127, 127] scaled by `max|x| / 127`; and
//! `int8-rows`, the same with a step per row of `row_len` values, so that
//! a row far smaller than the largest keeps its own precision (an
//! embedding table's rare rows beside its frequent ones).

use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;

/// Appends one signed byte per value.
pub fn encode(mut acc: Accumulator<'_>, out: &mut Vec<u8>) -> Result<Params, EncodeError> {
    let max = acc.max_abs()?;
    let step = max / 127.0;
    // At max = f32::MAX the division rounds up and 127 * step overflows.
    if !(step * 127.0).is_finite() {
        return Err(overflow(&acc, max, "int8"));
    }
    out.reserve(acc.len());
    for i in 0..acc.len() {
        let q = round_level(acc.get(i) / step);
        out.push(q as u8);
        acc.settle(i, f32::from(q) * step);
    }
    Ok(Params::Int8 { step })
}

/// At `max` near f32::MAX the step rounds up and 127 steps overflow: the
/// value that set it, for the error.
fn overflow(acc: &Accumulator<'_>, max: f32, codec: &'static str) -> EncodeError {
    let (index, value) = acc.find_magnitude(max);
    EncodeError::OutOfRange {
        codec,
        value,
        index,
    }
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

/// `int8-rows`: per row of `row_len` values (the last may be shorter), its
/// step (f32, little-endian) then one signed byte per value.
pub fn encode_rows(
    mut acc: Accumulator<'_>,
    row_len: u32,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    // Refuses non-finite input with its position, as `encode` does.
    acc.max_abs()?;
    let row_len = row_len.max(1);
    let row = usize::try_from(row_len).unwrap_or(usize::MAX);
    let n = acc.len();
    out.reserve(n + n.div_ceil(row) * 4);
    let mut start = 0;
    while start < n {
        let end = n.min(start.saturating_add(row));
        let max = (start..end).fold(0.0f32, |m, i| m.max(acc.get(i).abs()));
        let step = max / 127.0;
        if !(step * 127.0).is_finite() {
            return Err(overflow(&acc, max, "int8-rows"));
        }
        out.extend_from_slice(&step.to_le_bytes());
        for i in start..end {
            let q = round_level(acc.get(i) / step);
            out.push(q as u8);
            acc.settle(i, f32::from(q) * step);
        }
        start = end;
    }
    Ok(Params::Int8Rows { row_len })
}

/// The payload length of `int8-rows` for `elements` values.
pub fn rows_payload_len(elements: u64, row_len: u32) -> u64 {
    let rows = elements.div_ceil(u64::from(row_len.max(1)));
    elements.saturating_add(rows.saturating_mul(4))
}

/// `int8-rows`: each row's `x' = q * step`; a step that is not finite and
/// at least 0, or that overflows at level 127, and level -128 are refused.
pub fn decode_rows(row_len: u32, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    if payload.len() as u64 != rows_payload_len(out.len() as u64, row_len) {
        return Err(DecodeError::CorruptPayload(
            "int8-rows payload length does not match tensor",
        ));
    }
    let row = usize::try_from(row_len).unwrap_or(usize::MAX).max(1);
    let mut rest = payload;
    for values in out.chunks_mut(row) {
        let (step, levels) = rest.split_at(4);
        let step = f32::from_le_bytes([step[0], step[1], step[2], step[3]]);
        if !(step.is_finite() && step >= 0.0 && (step * 127.0).is_finite()) {
            return Err(DecodeError::CorruptPayload(
                "int8-rows step must be finite, >= 0 and not overflow at level 127",
            ));
        }
        let (levels, after) = levels.split_at(values.len());
        decode(step, levels, values)?;
        rest = after;
    }
    Ok(())
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
