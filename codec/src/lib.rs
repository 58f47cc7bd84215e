//! Tensor codecs for tlc: 3LC and the baselines it is measured against, and
//! the self-describing, checksummed frame each encoded tensor travels in.
//!
//! Pure computation: no I/O, no async, no global state. The sidecar and the
//! command-line tools build on three pieces:
//!
//! - [`Codec`] names a codec and its settings (for 3LC the [`Sparsity`] `s`);
//! - an [`Encoder`] is one context: codec, error buffer, frame counter;
//! - [`Frame::parse`] and [`decode`] check a frame against caller [`Limits`]
//!   and decode it, returning a typed [`DecodeError`] for anything hostile.
//!
//! The frame layout is documented byte by byte in `FORMAT.md`.

#![warn(missing_docs)]

pub mod bitmap;
mod codec;
mod dispatch;
mod encoder;
mod error;
pub mod feedback;
pub mod float16;
pub mod frame;
pub mod int8;
pub mod onebit;
pub mod raw;
pub mod terngrad;
pub mod tlc3;
pub mod topk;

pub use codec::{Codec, CodecId, Sparsity, TopKPercent};
pub use encoder::{Encoder, Feedback};
pub use error::{DecodeError, EncodeError, SpecError};
pub use frame::{Frame, FrameHeader, Limits, Params};

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
