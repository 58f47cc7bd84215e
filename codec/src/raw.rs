//! `none`: raw little-endian f32, lossless.

use crate::error::DecodeError;
use crate::feedback::Accumulator;
use crate::params::Params;

/// Appends `acc` as little-endian f32. Everything is sent, so the residual
/// becomes zero; non-finite values pass through unchanged.
pub fn encode(mut acc: Accumulator<'_>, out: &mut Vec<u8>) -> Params {
    out.reserve(acc.len() * 4);
    for i in 0..acc.len() {
        out.extend_from_slice(&acc.get(i).to_le_bytes());
    }
    acc.settle_all_exactly();
    Params::None
}

/// Reads little-endian f32 values.
pub fn decode(payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    if payload.len() != out.len() * 4 {
        return Err(DecodeError::CorruptPayload(
            "raw payload length does not match tensor",
        ));
    }
    for (v, bytes) in out.iter_mut().zip(payload.chunks_exact(4)) {
        *v = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    Ok(())
}
