//! The entropy stage (frame flags bit 1): Zstandard over a codec's payload.
//!
//! It sits between the frame and the codecs: the codecs' bit-exact payloads
//! are unchanged underneath, and decoding the stage gives back exactly the
//! payload a plain frame would carry. An encoder that asks for it keeps it
//! only when the frame gets smaller. Decoding is bounded: `frame` checks the
//! declared `raw_len` against the codec and element count (so against the
//! caller's `Limits`) before this module allocates
//! `raw_len` bytes, and zstd writes into exactly that buffer and no further.
//!
//! zstd level 1 was chosen by measurement (`benches/entropy_choice.rs`):
//! within 1–4% of an order-0 rANS on real 3LC payloads, several times
//! faster, and a standard format (RFC 8878) any zstd library reads.

use std::borrow::Cow;
use std::cell::RefCell;

use zstd::zstd_safe::{self, CCtx, DCtx};

use crate::error::DecodeError;

/// Bytes of the `raw_len` field in front of the coded bytes.
pub const RAW_LEN_BYTES: usize = 4;

/// The zstd compression level the encoder uses.
pub const ZSTD_LEVEL: i32 = 1;

/// Whether an `Encoder` passes each payload through the
/// entropy stage.
///
/// A reader built before the stage rejects a frame that uses it with
/// [`DecodeError::ReservedFlags`], so turn it on only for a peer known to
/// read it; decoding handles both kinds of frame transparently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntropyStage {
    /// Plain frames, byte for byte what an encoder without the stage writes.
    #[default]
    Off,
    /// Code each payload with zstd (level [`ZSTD_LEVEL`], one frame, no
    /// checksum) and keep it only when `raw_len` and the coded bytes are
    /// shorter than the payload; otherwise write the plain frame.
    Zstd,
}

thread_local! {
    // One context of each kind per thread, made on first use: creating one
    // per frame costs an allocation of over 100 KiB and its setup.
    static COMPRESSOR: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// Codes the payload `out[start..]` in place if that saves bytes, using
/// `scratch` as working space, and returns its length before the stage
/// (`raw_len`). Returns `None`, with `out` unchanged, when the stage would
/// not make the frame smaller or zstd fails for any reason.
pub(crate) fn encode(out: &mut Vec<u8>, start: usize, scratch: &mut Vec<u8>) -> Option<u32> {
    let raw = out.get(start..)?;
    let raw_len = u32::try_from(raw.len()).ok()?;
    // Worth it only if `4 + coded < raw_len`: zstd stops at this budget.
    let budget = raw.len().checked_sub(RAW_LEN_BYTES + 1)?;
    scratch.resize(budget, 0);
    let coded = COMPRESSOR.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Some(CCtx::try_create()?);
        }
        let cctx = slot.as_mut()?;
        cctx.compress(&mut scratch[..], raw, ZSTD_LEVEL).ok()
    })?;
    let coded = scratch.get(..coded)?;
    out.truncate(start);
    out.extend_from_slice(&raw_len.to_le_bytes());
    out.extend_from_slice(coded);
    Some(raw_len)
}

/// Splits a stage's stored bytes into `raw_len` and the coded bytes.
pub(crate) fn split(stored: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    match stored.split_first_chunk::<RAW_LEN_BYTES>() {
        Some((head, coded)) => Ok((u32::from_le_bytes(*head), coded)),
        None => Err(DecodeError::Entropy(
            "payload shorter than its 4-byte raw_len",
        )),
    }
}

/// Decodes the stored bytes of an entropy-coded frame (`raw_len` and the
/// coded bytes) to the codec payload. `raw_len` must have been checked
/// against the codec and element count: exactly that many bytes are
/// allocated, and the coded bytes must fill them exactly.
pub(crate) fn decode(stored: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let (raw_len, coded) = split(stored)?;
    if coded.is_empty() {
        return Err(DecodeError::Entropy("no coded bytes"));
    }
    let raw_len = usize::try_from(raw_len)
        .map_err(|_| DecodeError::Entropy("raw_len does not fit in memory"))?;
    let mut raw = vec![0u8; raw_len];
    let written = DECOMPRESSOR.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| DecodeError::Entropy("zstd context busy"))?;
        if slot.is_none() {
            *slot = Some(
                DCtx::try_create().ok_or(DecodeError::Entropy("zstd could not make a context"))?,
            );
        }
        let dctx = slot
            .as_mut()
            .ok_or(DecodeError::Entropy("zstd could not make a context"))?;
        // The buffer is exactly raw_len bytes: a stream that expands past
        // it fails ("Destination buffer is too small") instead of growing it.
        dctx.decompress(&mut raw[..], coded)
            .map_err(|code| DecodeError::Entropy(zstd_safe::get_error_name(code)))
    })?;
    if written != raw_len {
        return Err(DecodeError::Entropy("coded bytes expand short of raw_len"));
    }
    Ok(raw)
}

/// The codec payload behind a frame's stored bytes: borrowed as it is for
/// a plain frame, decoded for an entropy-coded one.
pub(crate) fn codec_payload(stored: &[u8], coded: bool) -> Result<Cow<'_, [u8]>, DecodeError> {
    if coded {
        decode(stored).map(Cow::Owned)
    } else {
        Ok(Cow::Borrowed(stored))
    }
}
