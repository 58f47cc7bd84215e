//! `fp16` and `bf16`: 16-bit floats, rounded to nearest even (the `half` crate).

use half::{bf16, f16};

use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;

/// Which 16-bit format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    /// IEEE 754 binary16.
    Fp16,
    /// bfloat16.
    Bf16,
}

impl Half {
    #[inline(always)]
    fn round(self, v: f32) -> (u16, f32) {
        match self {
            Half::Fp16 => {
                let h = f16::from_f32(v);
                (h.to_bits(), h.to_f32())
            }
            Half::Bf16 => {
                let h = bf16::from_f32(v);
                (h.to_bits(), h.to_f32())
            }
        }
    }

    #[inline(always)]
    fn widen(self, bits: u16) -> f32 {
        match self {
            Half::Fp16 => f16::from_bits(bits).to_f32(),
            Half::Bf16 => bf16::from_bits(bits).to_f32(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Half::Fp16 => "fp16",
            Half::Bf16 => "bf16",
        }
    }
}

/// Appends each value as a 16-bit float. A value that would round to
/// infinity (above 65504 for fp16) is an error, not a silent overflow.
pub fn encode(
    format: Half,
    mut acc: Accumulator<'_>,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    let max = acc.max_abs()?;
    // Rounding is monotonic, so if the largest magnitude fits, all do.
    if format.round(max).1.is_infinite() {
        let index = (0..acc.len())
            .find(|&i| acc.get(i).abs() == max)
            .unwrap_or(0);
        return Err(EncodeError::OutOfRange {
            codec: format.name(),
            value: acc.get(index),
            index,
        });
    }
    out.reserve(acc.len() * 2);
    for i in 0..acc.len() {
        let (bits, sent) = format.round(acc.get(i));
        out.extend_from_slice(&bits.to_le_bytes());
        acc.settle(i, sent);
    }
    Ok(match format {
        Half::Fp16 => Params::Fp16,
        Half::Bf16 => Params::Bf16,
    })
}

/// Widens 16-bit floats back to f32. Non-finite values are refused: the
/// encoder never produces them.
pub fn decode(format: Half, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    if payload.len() != out.len() * 2 {
        return Err(DecodeError::CorruptPayload(
            "16-bit payload length does not match tensor",
        ));
    }
    for (v, bytes) in out.iter_mut().zip(payload.chunks_exact(2)) {
        *v = format.widen(u16::from_le_bytes([bytes[0], bytes[1]]));
        if !v.is_finite() {
            return Err(DecodeError::CorruptPayload("non-finite 16-bit value"));
        }
    }
    Ok(())
}
