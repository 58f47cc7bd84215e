//! The compact envelope: an envelope as two sidecars that agreed on it
//! (the requester's `tlc-compact` header) send it on the hop. The same
//! fields and frames, without what the hop does not need: no magic,
//! version or reserved bytes, small numbers as varints, each frame in its
//! compact form ([`tlc_codec::compact`]) and one checksum for the whole
//! instead of one per part. A push of one 3LC frame is framed in
//! about 30 bytes instead of 81, and each further frame of a chain or a
//! refinement in about 12 instead of 33.
//!
//! [`pack`] turns a checked envelope into its compact form and [`unpack`]
//! turns it back, byte for byte, so that the receiver parses and decodes
//! exactly what it would have received without it: every check of
//! [`crate::Envelope::parse`] still runs.
//!
//! Byte layout (`ENVELOPE.md` says the same in prose):
//!
//! | size | field | meaning |
//! |---:|---|---|
//! | 1 | mark | `0xC1`, never the first byte of an envelope (`T`) |
//! | 1 | kind | as the envelope's |
//! | 8 | fallback token | u64, little-endian |
//! | 8 | epoch | the pull kinds only (chain, keyframe, rows pull): u64 |
//! | varint | base version | |
//! | varint | target − base | |
//! | varint | frame count | |
//! | 32 | rows section | the rows kinds only, as in the envelope |
//! | … | frames | `frame count` compact frames back to back |
//! | 4 | crc32c | CRC-32C of every byte before it |

use thiserror::Error;
use tlc_codec::compact::{get_varint, put_varint};
use tlc_codec::{DecodeError, Limits};

use crate::envelope::{EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN};
use crate::rows::ROWS_SECTION_LEN;

/// The first byte of every compact envelope.
pub const MARK: u8 = 0xC1;

/// Bytes of the checksum that ends a compact envelope.
const CRC_LEN: usize = 4;

/// How many times its length a compact envelope's full form may take
/// (besides [`GROWTH_SLACK`]): the requester holds the full form before
/// it is charged to the in-flight budget, so a peer must not make a small
/// compact envelope into a large one. Frames of one value are the worst
/// valid case, about 4.5 times; a tensor of 16 values or more, under 3.
pub const MAX_GROWTH: usize = 4;

/// Bytes a compact envelope's full form may take beyond [`MAX_GROWTH`]
/// times its length: what lets a small valid envelope of tiny frames grow
/// by its fixed headers.
pub const GROWTH_SLACK: usize = 1024;

/// Why bytes could not be packed or unpacked. Unpacking reads a peer's
/// bytes: every variant is a peer's fault (or a bug), never a panic.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CompactError {
    /// Fewer bytes than the fields need.
    #[error("compact envelope truncated at {0} bytes")]
    Truncated(usize),
    /// The first byte is not [`MARK`].
    #[error("not a compact envelope (first byte {0:#04x})")]
    BadMark(u8),
    /// The checksum does not match.
    #[error(
        "compact envelope checksum mismatch: stored {stored:#010x}, bytes give {computed:#010x}"
    )]
    Checksum {
        /// CRC-32C stored at the end.
        stored: u32,
        /// CRC-32C of the bytes before it.
        computed: u32,
    },
    /// A kind byte that names no envelope kind.
    #[error("unknown envelope kind {0}")]
    UnknownKind(u8),
    /// A number that runs past the bytes or past its field's width.
    #[error("compact envelope: {0}")]
    Number(&'static str),
    /// The fields break the rules of the envelope (see [`EnvelopeHeader::validate`]),
    /// or the envelope to pack is not a valid one.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// A frame is malformed.
    #[error("compact frame {index}: {source}")]
    Frame {
        /// Position of the frame, from 0.
        index: u32,
        /// What was wrong with it.
        source: DecodeError,
    },
    /// The full form would be more than [`MAX_GROWTH`] times the compact
    /// one (this many bytes) plus [`GROWTH_SLACK`].
    #[error("a compact envelope of {0} bytes would grow past its bound")]
    Grows(usize),
    /// Bytes remain after the declared frames.
    #[error("{0} trailing bytes after the compact envelope's last frame")]
    TrailingBytes(usize),
}

/// Whether `bytes` start like a compact envelope.
pub fn is_compact(bytes: &[u8]) -> bool {
    bytes.first() == Some(&MARK)
}

/// The fallback token of a compact envelope, read before its checksum is:
/// for asking the holder's sidecar for the original when the envelope
/// cannot be unpacked. A damaged token names no response the holder
/// keeps (tokens are random), so the worst it does is fail that ask.
pub fn token(compact: &[u8]) -> Option<u64> {
    let bytes = compact.get(2..10)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    is_compact(compact).then_some(u64::from_le_bytes(word))
}

/// Whether envelopes of `kind` carry an epoch (the pull kinds).
fn has_epoch(kind: Kind) -> bool {
    matches!(kind, Kind::Chain | Kind::Keyframe | Kind::RowsPull)
}

/// Appends the compact form of `envelope` (a whole envelope, its header
/// and every frame checked with their checksums) to `out`. On error `out`
/// may hold part of it: the caller sends the envelope as it is.
pub fn pack(envelope: &[u8], out: &mut Vec<u8>) -> Result<(), CompactError> {
    let header = EnvelopeHeader::parse(envelope)?;
    let start = out.len();
    out.push(MARK);
    out.push(header.kind as u8);
    out.extend_from_slice(&header.fallback_token.to_le_bytes());
    if has_epoch(header.kind) {
        out.extend_from_slice(&header.epoch.to_le_bytes());
    }
    put_varint(out, header.base_version);
    // validate() holds target >= base for every kind.
    put_varint(out, header.target_version - header.base_version);
    put_varint(out, u64::from(header.frame_count));
    let mut rest = &envelope[HEADER_LEN..];
    if header.kind.has_rows() {
        let section = rest
            .get(..ROWS_SECTION_LEN)
            .ok_or(CompactError::Truncated(envelope.len()))?;
        out.extend_from_slice(section);
        rest = &rest[ROWS_SECTION_LEN..];
    }
    let limits = Limits::default();
    for index in 0..header.frame_count {
        let used = tlc_codec::compact::pack(rest, &limits, out)
            .map_err(|source| CompactError::Frame { index, source })?;
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        return Err(CompactError::TrailingBytes(rest.len()));
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Appends to `out` the envelope whose compact form is `compact`, byte for
/// byte as [`pack`] read it. Checks the checksum first, then what the
/// rebuilding needs (the header's rules, each frame's codec, flags,
/// lengths and `limits`); the caller parses the result with
/// [`crate::Envelope::parse`] as any envelope. What it appends is bounded
/// by the input, never by a count: it refuses a compact envelope whose
/// full form would be more than [`MAX_GROWTH`] times as long plus
/// [`GROWTH_SLACK`] bytes (a valid one grows by 35 bytes plus 21 a frame,
/// and its frames carry their values), stopping before it writes another
/// frame past that: all told, at most `MAX_GROWTH + 1` times the input
/// plus [`GROWTH_SLACK`] and 25 bytes.
pub fn unpack(compact: &[u8], limits: &Limits, out: &mut Vec<u8>) -> Result<(), CompactError> {
    let first = *compact.first().ok_or(CompactError::Truncated(0))?;
    if first != MARK {
        return Err(CompactError::BadMark(first));
    }
    let body_len = compact
        .len()
        .checked_sub(CRC_LEN)
        .ok_or(CompactError::Truncated(compact.len()))?;
    let (body, crc) = compact.split_at(body_len);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(CompactError::Checksum { stored, computed });
    }
    let mut reader = Reader { body, at: 1 };
    let kind_byte = reader.take(1)?[0];
    let kind = Kind::from_byte(kind_byte).ok_or(CompactError::UnknownKind(kind_byte))?;
    let fallback_token = reader.u64_le()?;
    let epoch = if has_epoch(kind) { reader.u64_le()? } else { 0 };
    let base_version = reader.varint()?;
    let target_version = base_version
        .checked_add(reader.varint()?)
        .ok_or(CompactError::Number("target version beyond 64 bits"))?;
    let frame_count = u32::try_from(reader.varint()?)
        .map_err(|_| CompactError::Number("frame count beyond 32 bits"))?;
    let header = EnvelopeHeader {
        kind,
        fallback_token,
        epoch,
        base_version,
        target_version,
        frame_count,
    };
    header.validate()?;
    let start = out.len();
    header.write(out);
    if kind.has_rows() {
        out.extend_from_slice(reader.take(ROWS_SECTION_LEN)?);
    }
    let most = compact
        .len()
        .saturating_mul(MAX_GROWTH)
        .saturating_add(GROWTH_SLACK);
    for index in 0..frame_count {
        if out.len() - start > most {
            return Err(CompactError::Grows(compact.len()));
        }
        let rest = &body[reader.at..];
        let used = tlc_codec::compact::unpack(rest, limits, out)
            .map_err(|source| CompactError::Frame { index, source })?;
        reader.at += used;
    }
    match body.len() - reader.at {
        0 => Ok(()),
        left => Err(CompactError::TrailingBytes(left)),
    }
}

/// Reads the fields of a compact envelope's body in order.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], CompactError> {
        let end = self.at.saturating_add(len);
        let bytes = self
            .body
            .get(self.at..end)
            .ok_or(CompactError::Truncated(self.body.len()))?;
        self.at = end;
        Ok(bytes)
    }

    fn u64_le(&mut self) -> Result<u64, CompactError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn varint(&mut self) -> Result<u64, CompactError> {
        let (value, used) = get_varint(&self.body[self.at..]).ok_or(CompactError::Number(
            "a number runs past the bytes or past 64 bits",
        ))?;
        self.at += used;
        Ok(value)
    }
}

#[cfg(test)]
mod tests;
