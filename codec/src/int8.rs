//! `int8`: 255 levels in [-127, 127] scaled by `max|x| / 127`.

use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::frame::Params;

/// Appends one signed byte per value.
pub fn encode(mut acc: Accumulator<'_>, out: &mut Vec<u8>) -> Result<Params, EncodeError> {
    let step = acc.max_abs()? / 127.0;
    out.reserve(acc.len());
    for i in 0..acc.len() {
        // NaN (0/0 when the tensor is all zeros) casts to 0.
        let q = (acc.get(i) / step).round_ties_even().clamp(-127.0, 127.0) as i8;
        out.push(q as u8);
        acc.settle(i, f32::from(q) * step);
    }
    Ok(Params::Int8 { step })
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
