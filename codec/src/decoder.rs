//! Decoding: a parsed frame's payload through the entropy stage, if the
//! frame uses it, and the codec its parameters name. The layer above the
//! frame format (`frame`, which parses and checks), the entropy stage
//! (`entropy`) and the codec registry (`dispatch`, which decodes a payload),
//! as `encoder` is on the encoding side.

use std::borrow::Cow;

use crate::error::DecodeError;
use crate::frame::{Frame, Limits};
use crate::{dispatch, entropy};

// An inherent impl outside `frame`, so that `frame` stays pure layout and
// parsing and never calls into the codecs.
impl<'a> Frame<'a> {
    /// The codec payload: the stored bytes of a plain frame, or what the
    /// entropy stage's coded bytes decode to (exactly `raw_len` bytes,
    /// allocated only after `raw_len` passed the checks of
    /// [`Frame::parse`]).
    pub fn codec_payload(&self) -> Result<Cow<'a, [u8]>, DecodeError> {
        entropy::codec_payload(self.payload, self.header.raw_len.is_some())
    }

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
        let payload = self.codec_payload()?;
        dispatch::decode(&self.header.params, &payload, out)
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
