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
//! An encoder may also pass each payload through an entropy stage (zstd,
//! [`EntropyStage`], off by default); decoding handles both kinds of frame.
//!
//! The frame layout is documented byte by byte in `FORMAT.md`, and so is its
//! compact form ([`compact`]), which two sidecars that agree on it use on
//! the hop.

#![warn(missing_docs)]

pub mod bitmap;
mod codec;
pub mod compact;
mod decoder;
mod dispatch;
mod encoder;
mod entropy;
mod error;
pub mod feedback;
pub mod float16;
pub mod frame;
pub mod int8;
pub mod onebit;
mod params;
pub mod quantize;
pub mod quartic;
pub mod raw;
pub mod terngrad;
pub mod tlc3;
pub mod topk;

pub use codec::{Codec, CodecId, Sparsity, TopKPercent};
pub use decoder::decode;
pub use encoder::{Encoder, Feedback};
pub use entropy::{EntropyStage, RAW_LEN_BYTES, ZSTD_LEVEL};
pub use error::{DecodeError, EncodeError, SpecError};
pub use frame::{Frame, FrameHeader, Limits};
pub use params::Params;
