//! Decoding: a parsed frame's payload through the codec its parameters
//! name. The layer above both the frame format (`frame`, which parses and
//! checks) and the codec registry (`dispatch`, which decodes a payload),
//! as `encoder` is on the encoding side.

use crate::dispatch;
use crate::error::DecodeError;
use crate::frame::{Frame, Limits};

// An inherent impl outside `frame`, so that `frame` stays pure layout and
// parsing and never calls into the codecs.
impl Frame<'_> {
    /// Decodes the payload into `out`, which must hold exactly
    /// `header.elements` values. On error `out` holds unspecified values and
    /// must not be used.
    pub fn decode_into(&self, out: &mut [f32]) -> Result<(), DecodeError> {
        if out.len() as u64 != self.header.elements {
            return Err(DecodeError::OutputLength {
                expected: self.header.elements,
                actual: out.len(),
            });
        }
        dispatch::decode(&self.header.params, self.payload, out)
    }
}

/// Parses and decodes the frame at the start of `bytes` into `out` (resized
/// to the frame's element count, which `limits` bounds), returning the
/// parsed frame. On error `out`'s contents are unspecified.
pub fn decode<'a>(
    bytes: &'a [u8],
    limits: &Limits,
    out: &mut Vec<f32>,
) -> Result<Frame<'a>, DecodeError> {
    let frame = Frame::parse(bytes, limits)?;
    // Bounded by limits.max_elements in Frame::parse.
    let n = usize::try_from(frame.header.elements).map_err(|_| DecodeError::TooManyElements {
        elements: frame.header.elements,
        limit: usize::MAX as u64,
    })?;
    out.clear();
    out.resize(n, 0.0);
    frame.decode_into(out)?;
    Ok(frame)
}
