//! The envelope: what one sidecar sends the other in place of a tensor's
//! bytes. A fixed, checksummed header that says what kind of answer this is
//! (a pushed gradient, a chain of model deltas, a model keyframe) followed
//! by tlc codec frames, each with its own checksum.
//!
//! Byte layout (little-endian; `wire/ENVELOPE.md` says the same in prose):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | ASCII `TLCE` |
//! | 4 | 1 | version | `1` |
//! | 5 | 1 | kind | `1` push, `2` pull delta chain, `3` pull keyframe, `4` rows pull, `5` rows push |
//! | 6 | 2 | reserved | must be `0` |
//! | 8 | 8 | fallback token | u64; lets the receiver ask the sender sidecar for the original response |
//! | 16 | 8 | epoch | u64; pull: random per sender-sidecar start, never 0; push: 0 |
//! | 24 | 8 | base_version | u64; chain: the version the receiver's replica must be at (≥ 1); rows pull: the mirror's version (0: empty); else 0 |
//! | 32 | 8 | target_version | u64; pull: the version after applying (≥ 1; rows pull: base + 1); push: 0 |
//! | 40 | 4 | frame count | u32; push 1 to 8, keyframe 1, chain `target - base` (0: up to date), rows pull 2, rows push 1 |
//! | 44 | 4 | crc32c | CRC-32C of bytes `0..44` |
//! | 48 | 32 | rows section | rows kinds only: see [`crate::rows`] |
//! | 48 or 80 | … | frames | `frame count` tlc frames back to back (`codec/FORMAT.md`), nothing after |
//!
//! Parsing ([`Envelope::parse`]) checks everything a receiver relies on
//! before it touches any state: header checksum, kind-specific fields,
//! every frame's own header, limits and checksum, that the frames fill the
//! buffer exactly, that a keyframe is `none` (lossless) or `int8` (a
//! tensor's first value, held as its int8 decode on both sides), that the
//! frames of a chain all have the same length, and for the rows kinds the
//! rows section and that each frame holds the values it declares.

use thiserror::Error;
use tlc_codec::{CodecId, DecodeError, Frame, Limits};

use crate::rows::{RowsKind, RowsSection, SectionError, ROWS_SECTION_LEN};

/// The four bytes every envelope starts with.
pub const MAGIC: [u8; 4] = *b"TLCE";
/// The envelope format version this module writes and reads.
pub const VERSION: u8 = 1;
/// Bytes of header before the first frame (fields and checksum).
pub const HEADER_LEN: usize = 48;
/// Bytes covered by the header checksum.
const CHECKED_LEN: usize = 44;

/// What an envelope answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A gradient pushed from a worker: exactly one frame, any codec.
    Push = 1,
    /// Model deltas that take a replica from `base_version` to
    /// `target_version`, one frame per version, applied in order.
    Chain = 2,
    /// The replica itself at `target_version`: one lossless (`none`) frame.
    Keyframe = 3,
    /// Gathered rows, for a mirror of the rows the requester holds: one
    /// version step (`target = base + 1`), a rows section, then two frames,
    /// the new rows' keyframes and the held rows' deltas.
    RowsPull = 4,
    /// IndexedSlices gradient values, one row per distinct id: a rows
    /// section, then one frame.
    RowsPush = 5,
}

impl Kind {
    /// The kind for a wire byte, if it names one.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Push),
            2 => Some(Kind::Chain),
            3 => Some(Kind::Keyframe),
            4 => Some(Kind::RowsPull),
            5 => Some(Kind::RowsPush),
            _ => None,
        }
    }

    /// Short name for errors, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Chain => "chain",
            Kind::Keyframe => "keyframe",
            Kind::RowsPull => "rows-pull",
            Kind::RowsPush => "rows-push",
        }
    }

    /// Whether envelopes of this kind carry a rows section
    /// ([`crate::rows`]) between the header and the frames.
    pub fn has_rows(self) -> bool {
        matches!(self, Kind::RowsPull | Kind::RowsPush)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an envelope was rejected. Every variant is a peer's bad bytes (or a
/// bug in the peer): the receiver falls back, it never panics.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EnvelopeError {
    /// Fewer bytes than the header needs.
    #[error("envelope truncated: need {needed} header bytes, have {available}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The first four bytes are not `TLCE`.
    #[error("not a tlc envelope (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// A format version this reader does not understand.
    #[error("unsupported envelope version {0} (this reader reads version 1)")]
    UnsupportedVersion(u8),
    /// A kind byte other than 1 to 5.
    #[error(
        "unknown envelope kind {0} (known: 1 push, 2 chain, 3 keyframe, 4 rows-pull, 5 rows-push)"
    )]
    UnknownKind(u8),
    /// The reserved bytes are not zero.
    #[error("reserved envelope bytes are {0:#06x}, must be 0")]
    Reserved(u16),
    /// The header checksum does not match.
    #[error("envelope header checksum mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    Checksum {
        /// CRC32C stored in the header.
        stored: u32,
        /// CRC32C computed over bytes 0..44.
        computed: u32,
    },
    /// A header field breaks a rule of its kind (for example a push with an
    /// epoch, or a chain whose target is below its base).
    #[error("invalid {kind} envelope: {reason}")]
    Field {
        /// The envelope's kind.
        kind: Kind,
        /// The rule broken.
        reason: &'static str,
    },
    /// The frame count is not the one the kind and versions require.
    #[error(
        "{kind} envelope declares {declared} frames, its kind and versions require {expected}"
    )]
    FrameCount {
        /// The envelope's kind.
        kind: Kind,
        /// Count in the header.
        declared: u32,
        /// Count the kind (and for a chain, `target - base`) requires.
        expected: u64,
    },
    /// A frame is malformed, fails its checksum, breaks the limits or runs
    /// past the end of the envelope.
    #[error("frame {index} of the envelope: {source}")]
    Frame {
        /// Position of the frame, from 0.
        index: u32,
        /// What was wrong with it.
        source: DecodeError,
    },
    /// Bytes remain after the declared frames.
    #[error("{0} trailing bytes after the envelope's last frame")]
    TrailingBytes(usize),
    /// A keyframe whose frame is neither lossless nor int8.
    #[error("keyframe frame uses codec {0}; a keyframe is none (lossless) or int8")]
    KeyframeCodec(CodecId),
    /// The frames of a chain or a push do not all have the same number of
    /// values.
    #[error("frame {index} has {elements} values, frame 0 has {first}")]
    ChainLength {
        /// Position of the offending frame.
        index: u32,
        /// Its element count.
        elements: u64,
        /// Element count of the first frame.
        first: u64,
    },
    /// The rows section's checksum does not match.
    #[error(
        "rows section checksum mismatch: section says {stored:#010x}, bytes give {computed:#010x}"
    )]
    RowsChecksum {
        /// CRC32C stored in the section.
        stored: u32,
        /// CRC32C computed over its first 28 bytes.
        computed: u32,
    },
    /// A rows section field breaks a rule (see [`crate::rows`]).
    #[error("invalid rows section: {reason}")]
    Rows {
        /// The rule broken.
        reason: &'static str,
    },
    /// A rows section declares more values than the caller's limit.
    #[error("{rows} rows of {dim} values exceed the limit of {limit} values")]
    RowsTooLarge {
        /// Rows (distinct ids, or positions).
        rows: u32,
        /// Values per row.
        dim: u32,
        /// The caller's `max_elements`.
        limit: u64,
    },
    /// A frame of a rows envelope holds another number of values than its
    /// rows section declares.
    #[error("rows frame {index} has {elements} values, the rows section declares {expected}")]
    RowsFrameLength {
        /// Position of the frame.
        index: u32,
        /// Its element count.
        elements: u64,
        /// The count the section declares.
        expected: u64,
    },
}

/// Most frames a push envelope may carry: the gradient's frame and its
/// refinements (re-encodings of the error the previous frames left), which
/// the receiver adds up.
pub const MAX_PUSH_FRAMES: u32 = 8;

/// The header fields of an envelope (everything but magic, version,
/// reserved bytes and checksum, which the format fixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// What this envelope answers.
    pub kind: Kind,
    /// Opaque to the receiver; sent back to ask for the original response.
    pub fallback_token: u64,
    /// Pull: the sender sidecar's epoch (never 0). Push: 0.
    pub epoch: u64,
    /// Chain: the version the receiver's replica must be at. Else 0.
    pub base_version: u64,
    /// Pull: the replica's version after applying. Push: 0.
    pub target_version: u64,
    /// Number of frames that follow.
    pub frame_count: u32,
}

impl EnvelopeHeader {
    /// The header of a pushed gradient (one frame).
    pub fn push(fallback_token: u64) -> EnvelopeHeader {
        EnvelopeHeader {
            kind: Kind::Push,
            fallback_token,
            epoch: 0,
            base_version: 0,
            target_version: 0,
            frame_count: 1,
        }
    }

    /// The header of a keyframe: the replica at `version` (one frame).
    pub fn keyframe(fallback_token: u64, epoch: u64, version: u64) -> EnvelopeHeader {
        EnvelopeHeader {
            kind: Kind::Keyframe,
            fallback_token,
            epoch,
            base_version: 0,
            target_version: version,
            frame_count: 1,
        }
    }

    /// The header of a rows pull taking a mirror from `base` (0: empty) to
    /// `target`, which must be `base + 1` (two frames). Fails if not, or if
    /// `epoch` is 0.
    pub fn rows_pull(
        fallback_token: u64,
        epoch: u64,
        base: u64,
        target: u64,
    ) -> Result<EnvelopeHeader, EnvelopeError> {
        let header = EnvelopeHeader {
            kind: Kind::RowsPull,
            fallback_token,
            epoch,
            base_version: base,
            target_version: target,
            frame_count: 2,
        };
        header.validate()?;
        Ok(header)
    }

    /// The header of a rows push (one frame).
    pub fn rows_push(fallback_token: u64) -> EnvelopeHeader {
        EnvelopeHeader {
            kind: Kind::RowsPush,
            fallback_token,
            epoch: 0,
            base_version: 0,
            target_version: 0,
            frame_count: 1,
        }
    }

    /// The header of a chain from `base` to `target`, one frame per version.
    /// Fails if `target < base` or the difference does not fit the count.
    pub fn chain(
        fallback_token: u64,
        epoch: u64,
        base: u64,
        target: u64,
    ) -> Result<EnvelopeHeader, EnvelopeError> {
        let count = target.checked_sub(base).ok_or(EnvelopeError::Field {
            kind: Kind::Chain,
            reason: "target version is below base version",
        })?;
        let frame_count = u32::try_from(count).map_err(|_| EnvelopeError::Field {
            kind: Kind::Chain,
            reason: "a chain holds at most 2^32 - 1 frames",
        })?;
        let header = EnvelopeHeader {
            kind: Kind::Chain,
            fallback_token,
            epoch,
            base_version: base,
            target_version: target,
            frame_count,
        };
        header.validate()?;
        Ok(header)
    }

    /// Checks the rules of the header's kind: which fields must be zero,
    /// which must not, and the frame count.
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        let kind = self.kind;
        let field = |ok: bool, reason: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(EnvelopeError::Field { kind, reason })
            }
        };
        let expected = match kind {
            Kind::Push => {
                field(self.epoch == 0, "a push carries no epoch")?;
                field(self.base_version == 0, "a push carries no base version")?;
                field(self.target_version == 0, "a push carries no target version")?;
                // One gradient, then up to MAX_PUSH_FRAMES - 1 refinements
                // of its error: any count in that range is right.
                u64::from(self.frame_count.clamp(1, MAX_PUSH_FRAMES))
            }
            Kind::Keyframe => {
                field(self.epoch != 0, "epoch 0 is reserved for pushes")?;
                field(self.base_version == 0, "a keyframe has no base version")?;
                field(self.target_version != 0, "version 0 means no replica")?;
                1
            }
            Kind::Chain => {
                field(self.epoch != 0, "epoch 0 is reserved for pushes")?;
                field(self.base_version != 0, "version 0 means no replica")?;
                self.target_version
                    .checked_sub(self.base_version)
                    .ok_or(EnvelopeError::Field {
                        kind,
                        reason: "target version is below base version",
                    })?
            }
            Kind::RowsPull => {
                field(self.epoch != 0, "epoch 0 is reserved for pushes")?;
                field(
                    self.base_version.checked_add(1) == Some(self.target_version),
                    "a rows pull is one version step: target = base + 1",
                )?;
                // The new rows' keyframes, then one pass over the held
                // rows' deltas and up to MAX_PUSH_FRAMES - 2 refinements.
                u64::from(self.frame_count.clamp(2, MAX_PUSH_FRAMES))
            }
            Kind::RowsPush => {
                field(self.epoch == 0, "a push carries no epoch")?;
                field(self.base_version == 0, "a push carries no base version")?;
                field(self.target_version == 0, "a push carries no target version")?;
                // As a push: one pass, up to MAX_PUSH_FRAMES - 1 refinements.
                u64::from(self.frame_count.clamp(1, MAX_PUSH_FRAMES))
            }
        };
        if u64::from(self.frame_count) != expected {
            return Err(EnvelopeError::FrameCount {
                kind,
                declared: self.frame_count,
                expected,
            });
        }
        Ok(())
    }

    /// Appends the 48 header bytes (fields and checksum) to `out`; the
    /// caller appends exactly `frame_count` frames after them.
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.fallback_token.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.base_version.to_le_bytes());
        out.extend_from_slice(&self.target_version.to_le_bytes());
        out.extend_from_slice(&self.frame_count.to_le_bytes());
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads and checks the 48 header bytes at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<EnvelopeHeader, EnvelopeError> {
        let head = bytes.get(..HEADER_LEN).ok_or(EnvelopeError::Truncated {
            needed: HEADER_LEN,
            available: bytes.len(),
        })?;
        let u32_at =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&head[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let magic = [head[0], head[1], head[2], head[3]];
        if magic != MAGIC {
            return Err(EnvelopeError::BadMagic(magic));
        }
        if head[4] != VERSION {
            return Err(EnvelopeError::UnsupportedVersion(head[4]));
        }
        // The checksum before the fields: a flipped bit should read as
        // corruption, not as a confusing field error.
        let stored = u32_at(CHECKED_LEN);
        let computed = crc32c::crc32c(&head[..CHECKED_LEN]);
        if stored != computed {
            return Err(EnvelopeError::Checksum { stored, computed });
        }
        let kind = Kind::from_byte(head[5]).ok_or(EnvelopeError::UnknownKind(head[5]))?;
        let reserved = u16::from_le_bytes([head[6], head[7]]);
        if reserved != 0 {
            return Err(EnvelopeError::Reserved(reserved));
        }
        let header = EnvelopeHeader {
            kind,
            fallback_token: u64_at(8),
            epoch: u64_at(16),
            base_version: u64_at(24),
            target_version: u64_at(32),
            frame_count: u32_at(40),
        };
        header.validate()?;
        Ok(header)
    }
}

/// The codecs a keyframe's frame may use: lossless, or int8 for a
/// tensor's first value (the holder's replica is then that decode).
pub const KEYFRAME_CODECS: [CodecId; 2] = [CodecId::None, CodecId::Int8];

/// A parsed, fully checked envelope borrowing its frames from the input.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    /// The header fields.
    pub header: EnvelopeHeader,
    // Parsed once, so every frame's checksum is verified once. At most one
    // entry per 25 input bytes (the smallest frame), so this is bounded by
    // the input, never by the declared count.
    frames: Vec<Frame<'a>>,
    rows: Option<RowsSection>,
}

impl<'a> Envelope<'a> {
    /// Parses `bytes`, which must hold exactly one envelope. Checks the
    /// header (see [`EnvelopeHeader::parse`]), then every frame with
    /// [`Frame::parse`] against `limits`, that there are exactly
    /// `frame_count` of them with nothing after, that a keyframe's frame is
    /// one of [`KEYFRAME_CODECS`] and that a chain's frames all have the same length. A rows
    /// envelope's rows section is checked before its frames
    /// ([`RowsSection::parse`], [`RowsSection::check`] against `limits`),
    /// and each frame's element count against the section's after them.
    pub fn parse(bytes: &'a [u8], limits: &Limits) -> Result<Envelope<'a>, EnvelopeError> {
        let header = EnvelopeHeader::parse(bytes)?;
        let mut frames = Vec::new();
        let mut rest = &bytes[HEADER_LEN..];
        let mut rows = None;
        if header.kind.has_rows() {
            let needed = HEADER_LEN + ROWS_SECTION_LEN;
            if bytes.len() < needed {
                return Err(EnvelopeError::Truncated {
                    needed,
                    available: bytes.len(),
                });
            }
            let section = RowsSection::parse(rest)?;
            section.check(rows_kind(header.kind)?, header.base_version, limits)?;
            rest = &rest[ROWS_SECTION_LEN..];
            rows = Some(section);
        }
        for index in 0..header.frame_count {
            let frame = Frame::parse(rest, limits)
                .map_err(|source| EnvelopeError::Frame { index, source })?;
            // Frame::parse checked that frame_len bytes are present.
            rest = &rest[frame.header.frame_len()..];
            frames.push(frame);
        }
        if !rest.is_empty() {
            return Err(EnvelopeError::TrailingBytes(rest.len()));
        }
        match header.kind {
            Kind::Keyframe => {
                let codec = frames.first().map_or(CodecId::None, |f| f.header.codec());
                if !KEYFRAME_CODECS.contains(&codec) {
                    return Err(EnvelopeError::KeyframeCodec(codec));
                }
            }
            Kind::RowsPull | Kind::RowsPush => {
                let kind = rows_kind(header.kind)?;
                for (index, frame) in (0u32..).zip(&frames) {
                    let expected = rows.as_ref().map_or(0, |r| r.frame_elements(kind, index));
                    if frame.header.elements != expected {
                        return Err(EnvelopeError::RowsFrameLength {
                            index,
                            elements: frame.header.elements,
                            expected,
                        });
                    }
                }
            }
            Kind::Push | Kind::Chain => {
                let first = frames.first().map_or(0, |f| f.header.elements);
                for (index, frame) in (0u32..).zip(&frames) {
                    if frame.header.elements != first {
                        return Err(EnvelopeError::ChainLength {
                            index,
                            elements: frame.header.elements,
                            first,
                        });
                    }
                }
            }
        }
        Ok(Envelope {
            header,
            frames,
            rows,
        })
    }

    /// The rows section of a rows envelope (kinds 4 and 5), checked;
    /// `None` for the other kinds.
    pub fn rows(&self) -> Option<RowsSection> {
        self.rows
    }

    /// The frames, in the order they are to be applied.
    pub fn frames(&self) -> &[Frame<'a>] {
        &self.frames
    }

    /// Number of values each frame decodes to (0 for an empty chain).
    pub fn elements(&self) -> u64 {
        self.frames.first().map_or(0, |f| f.header.elements)
    }
}

/// Appends a whole envelope: `header` (validated) and then `frames`, which
/// must be exactly `header.frame_count` complete frames; not for the rows
/// kinds, whose section goes between (write the header,
/// [`RowsSection::write`], then the frames). Used where the
/// frames already exist as bytes (the pull side's cache); the push side
/// writes the header and lets the encoder append its frame directly.
pub fn write_envelope<B: AsRef<[u8]>>(
    header: &EnvelopeHeader,
    frames: &[B],
    out: &mut Vec<u8>,
) -> Result<(), EnvelopeError> {
    if header.kind.has_rows() {
        return Err(EnvelopeError::Field {
            kind: header.kind,
            reason: "a rows envelope carries a rows section (write_rows_envelope)",
        });
    }
    write_parts(header, None, frames, out)
}

/// Appends a whole rows envelope: `header` (validated, a rows kind),
/// `section` and then `frames`, which must be exactly `header.frame_count`
/// complete frames. The encoders of `tlc_context::rows` write the parts
/// themselves; this is for tests and tools.
pub fn write_rows_envelope<B: AsRef<[u8]>>(
    header: &EnvelopeHeader,
    section: &RowsSection,
    frames: &[B],
    out: &mut Vec<u8>,
) -> Result<(), EnvelopeError> {
    if !header.kind.has_rows() {
        return Err(EnvelopeError::Field {
            kind: header.kind,
            reason: "only rows envelopes carry a rows section",
        });
    }
    write_parts(header, Some(section), frames, out)
}

fn write_parts<B: AsRef<[u8]>>(
    header: &EnvelopeHeader,
    section: Option<&RowsSection>,
    frames: &[B],
    out: &mut Vec<u8>,
) -> Result<(), EnvelopeError> {
    header.validate()?;
    if frames.len() as u64 != u64::from(header.frame_count) {
        return Err(EnvelopeError::FrameCount {
            kind: header.kind,
            declared: header.frame_count,
            expected: frames.len() as u64,
        });
    }
    let len: usize = frames.iter().map(|f| f.as_ref().len()).sum();
    out.reserve(HEADER_LEN + ROWS_SECTION_LEN + len);
    header.write(out);
    if let Some(section) = section {
        section.write(out);
    }
    for frame in frames {
        out.extend_from_slice(frame.as_ref());
    }
    Ok(())
}

/// The rows kind of an envelope `kind` that carries a rows section.
fn rows_kind(kind: Kind) -> Result<RowsKind, EnvelopeError> {
    match kind {
        Kind::RowsPull => Ok(RowsKind::Pull),
        Kind::RowsPush => Ok(RowsKind::Push),
        Kind::Push | Kind::Chain | Kind::Keyframe => Err(EnvelopeError::Field {
            kind,
            reason: "only rows envelopes carry a rows section",
        }),
    }
}

impl From<SectionError> for EnvelopeError {
    fn from(err: SectionError) -> EnvelopeError {
        match err {
            SectionError::Truncated { needed, available } => {
                EnvelopeError::Truncated { needed, available }
            }
            SectionError::Checksum { stored, computed } => {
                EnvelopeError::RowsChecksum { stored, computed }
            }
            SectionError::Rule { reason } => EnvelopeError::Rows { reason },
            SectionError::TooLarge { rows, dim, limit } => {
                EnvelopeError::RowsTooLarge { rows, dim, limit }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlc_codec::{Codec, Encoder, Feedback, Sparsity};

    fn frame(codec: Codec, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::new();
        Encoder::new(codec, Feedback::Off)
            .encode(values, &mut out)
            .unwrap();
        out
    }

    fn three_lc() -> Codec {
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        }
    }

    /// Rewrites the header checksum after a test tampered with a field.
    fn reseal(bytes: &mut [u8]) {
        let crc = crc32c::crc32c(&bytes[..CHECKED_LEN]);
        bytes[CHECKED_LEN..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    fn chain(base: u64, target: u64, frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let header = EnvelopeHeader::chain(9, 77, base, target).unwrap();
        write_envelope(&header, frames, &mut out).unwrap();
        out
    }

    #[test]
    fn header_layout_is_as_documented() {
        let mut out = Vec::new();
        EnvelopeHeader::chain(0x0102, 0x0304, 5, 7)
            .unwrap()
            .write(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(&out[0..4], b"TLCE");
        assert_eq!(out[4], 1);
        assert_eq!(out[5], 2);
        assert_eq!(&out[6..8], &[0, 0]);
        assert_eq!(out[8..16], 0x0102u64.to_le_bytes());
        assert_eq!(out[16..24], 0x0304u64.to_le_bytes());
        assert_eq!(out[24..32], 5u64.to_le_bytes());
        assert_eq!(out[32..40], 7u64.to_le_bytes());
        assert_eq!(out[40..44], 2u32.to_le_bytes());
        assert_eq!(out[44..48], crc32c::crc32c(&out[..44]).to_le_bytes());
    }

    #[test]
    fn round_trips_every_kind() {
        let values = [0.5f32, -1.0, 0.25, 0.0, 2.0, 3.0];
        let limits = Limits::default();

        let mut push = Vec::new();
        write_envelope(
            &EnvelopeHeader::push(3),
            &[frame(three_lc(), &values)],
            &mut push,
        )
        .unwrap();
        let env = Envelope::parse(&push, &limits).unwrap();
        assert_eq!(env.header, EnvelopeHeader::push(3));
        assert_eq!(env.frames().len(), 1);
        assert_eq!(env.elements(), 6);

        let mut key = Vec::new();
        let header = EnvelopeHeader::keyframe(4, 77, 12);
        write_envelope(&header, &[frame(Codec::None, &values)], &mut key).unwrap();
        let env = Envelope::parse(&key, &limits).unwrap();
        assert_eq!(env.header, header);
        let mut decoded = vec![0.0; 6];
        env.frames()[0].decode_into(&mut decoded).unwrap();
        assert_eq!(decoded, values);

        let frames = vec![frame(three_lc(), &values), frame(Codec::Int8, &values)];
        let bytes = chain(3, 5, &frames);
        let env = Envelope::parse(&bytes, &limits).unwrap();
        assert_eq!(env.header.frame_count, 2);
        assert_eq!(env.frames()[1].header.codec(), CodecId::Int8);

        let empty = chain(5, 5, &[] as &[Vec<u8>]);
        let env = Envelope::parse(&empty, &limits).unwrap();
        assert_eq!(env.frames().len(), 0);
        assert_eq!(env.elements(), 0);
    }

    #[test]
    fn header_errors_are_typed() {
        let limits = Limits::default();
        let good = chain(1, 2, &[frame(three_lc(), &[1.0, 2.0])]);

        assert!(matches!(
            Envelope::parse(&good[..47], &limits),
            Err(EnvelopeError::Truncated {
                needed: 48,
                available: 47
            })
        ));
        assert!(matches!(
            Envelope::parse(&[], &limits),
            Err(EnvelopeError::Truncated { .. })
        ));

        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            Envelope::parse(&bad, &limits),
            Err(EnvelopeError::BadMagic(_))
        ));

        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(
            Envelope::parse(&bad, &limits).unwrap_err(),
            EnvelopeError::UnsupportedVersion(2)
        );

        let mut bad = good.clone();
        bad[20] ^= 1; // epoch, without resealing
        assert!(matches!(
            Envelope::parse(&bad, &limits),
            Err(EnvelopeError::Checksum { .. })
        ));

        let mut bad = good.clone();
        bad[5] = 9;
        reseal(&mut bad);
        assert_eq!(
            Envelope::parse(&bad, &limits).unwrap_err(),
            EnvelopeError::UnknownKind(9)
        );

        let mut bad = good.clone();
        bad[7] = 1;
        reseal(&mut bad);
        assert_eq!(
            Envelope::parse(&bad, &limits).unwrap_err(),
            EnvelopeError::Reserved(0x0100)
        );
    }

    #[test]
    fn kind_rules_are_enforced() {
        let limits = Limits::default();
        let one = frame(three_lc(), &[1.0, 2.0]);
        let with = |header: EnvelopeHeader, frames: &[Vec<u8>]| {
            // Bypass write_envelope's validation to forge what a hostile peer could send.
            let mut out = Vec::new();
            header.write(&mut out);
            for f in frames {
                out.extend_from_slice(f);
            }
            Envelope::parse(&out, &limits).map(|e| e.header)
        };
        let push = EnvelopeHeader::push(0);
        assert!(matches!(
            with(
                EnvelopeHeader { epoch: 1, ..push },
                std::slice::from_ref(&one)
            ),
            Err(EnvelopeError::Field {
                kind: Kind::Push,
                ..
            })
        ));
        // A gradient and its refinements, all of one length: 1 to 8 frames.
        let two = EnvelopeHeader {
            frame_count: 2,
            ..push
        };
        assert_eq!(with(two, &[one.clone(), one.clone()]), Ok(two));
        let nine = vec![one.clone(); 9];
        assert!(matches!(
            with(
                EnvelopeHeader {
                    frame_count: 9,
                    ..push
                },
                &nine
            ),
            Err(EnvelopeError::FrameCount {
                declared: 9,
                expected: 8,
                ..
            })
        ));
        assert_eq!(
            with(two, &[one.clone(), frame(three_lc(), &[1.0])]),
            Err(EnvelopeError::ChainLength {
                index: 1,
                elements: 1,
                first: 2
            })
        );
        assert!(matches!(
            with(
                EnvelopeHeader {
                    frame_count: 0,
                    ..push
                },
                &[]
            ),
            Err(EnvelopeError::FrameCount {
                declared: 0,
                expected: 1,
                ..
            })
        ));
        let key = EnvelopeHeader::keyframe(0, 5, 3);
        assert!(matches!(
            with(
                EnvelopeHeader { epoch: 0, ..key },
                &[frame(Codec::None, &[1.0])]
            ),
            Err(EnvelopeError::Field {
                kind: Kind::Keyframe,
                ..
            })
        ));
        assert!(matches!(
            with(
                EnvelopeHeader {
                    target_version: 0,
                    ..key
                },
                &[frame(Codec::None, &[1.0])]
            ),
            Err(EnvelopeError::Field {
                kind: Kind::Keyframe,
                ..
            })
        ));
        // A keyframe is lossless or int8, never 3LC.
        assert_eq!(
            with(key, std::slice::from_ref(&one)).unwrap_err(),
            EnvelopeError::KeyframeCodec(CodecId::ThreeLc)
        );
        for codec in KEYFRAME_CODECS {
            let keyframe = frame(codec.with_defaults(), &[1.0, -0.5]);
            assert!(with(key, &[keyframe]).is_ok(), "{codec}");
        }
        // A chain's count is target - base.
        let mut c = EnvelopeHeader::chain(0, 5, 3, 4).unwrap();
        c.frame_count = 2;
        assert!(matches!(
            with(c, &[one.clone(), one.clone()]),
            Err(EnvelopeError::FrameCount {
                declared: 2,
                expected: 1,
                ..
            })
        ));
        let backwards = EnvelopeHeader {
            base_version: 5,
            target_version: 4,
            frame_count: 0,
            ..c
        };
        assert!(matches!(
            with(backwards, &[]),
            Err(EnvelopeError::Field { .. })
        ));
        assert!(EnvelopeHeader::chain(0, 5, 5, 4).is_err());
        assert!(EnvelopeHeader::chain(0, 5, 0, 1).is_err());
        assert!(EnvelopeHeader::chain(0, 5, 1, 1 + (1 << 32)).is_err());
        // Frames of one chain have one length.
        let two = chain(1, 3, &[one.clone(), one.clone()]);
        assert!(Envelope::parse(&two, &limits).is_ok());
        let mut out = Vec::new();
        write_envelope(
            &EnvelopeHeader::chain(0, 5, 1, 3).unwrap(),
            &[one.clone(), frame(three_lc(), &[1.0, 2.0, 3.0])],
            &mut out,
        )
        .unwrap();
        assert!(matches!(
            Envelope::parse(&out, &limits),
            Err(EnvelopeError::ChainLength {
                index: 1,
                elements: 3,
                first: 2
            })
        ));
    }

    #[test]
    fn frame_errors_are_typed() {
        let limits = Limits::default();
        let one = frame(three_lc(), &[1.0, 2.0, 3.0]);
        let good = chain(1, 3, &[one.clone(), one.clone()]);

        // Truncated inside the second frame.
        let cut = &good[..good.len() - 1];
        assert!(matches!(
            Envelope::parse(cut, &limits),
            Err(EnvelopeError::Frame {
                index: 1,
                source: DecodeError::Truncated { .. }
            })
        ));
        // Header only, frames missing.
        assert!(matches!(
            Envelope::parse(&good[..HEADER_LEN], &limits),
            Err(EnvelopeError::Frame {
                index: 0,
                source: DecodeError::Truncated { .. }
            })
        ));
        // Trailing bytes.
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            Envelope::parse(&long, &limits).unwrap_err(),
            EnvelopeError::TrailingBytes(1)
        );
        // A bad frame checksum.
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(
            Envelope::parse(&bad, &limits),
            Err(EnvelopeError::Frame {
                index: 1,
                source: DecodeError::Checksum { .. }
            })
        ));
        // Declares more frames than present (count and versions agree).
        let mut more = Vec::new();
        EnvelopeHeader::chain(0, 5, 1, 4).unwrap().write(&mut more);
        more.extend_from_slice(&one);
        more.extend_from_slice(&one);
        assert!(matches!(
            Envelope::parse(&more, &limits),
            Err(EnvelopeError::Frame {
                index: 2,
                source: DecodeError::Truncated { .. }
            })
        ));
    }

    #[test]
    fn huge_element_counts_are_refused_before_allocation() {
        // A codec-none frame in a chain claiming far more values than the
        // limit (and than the bytes present): rejected on its header.
        let mut f = frame(Codec::None, &[1.0, 2.0]);
        f[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let bytes = chain(1, 2, &[f]);
        let limits = Limits {
            max_elements: 1 << 20,
        };
        assert!(matches!(
            Envelope::parse(&bytes, &limits),
            Err(EnvelopeError::Frame {
                index: 0,
                source: DecodeError::TooManyElements {
                    elements: 1_099_511_627_776,
                    limit: 1_048_576
                }
            })
        ));
        // Without a limit, and with the frame's checksum made right, the
        // payload length gives the lie away.
        let limits = Limits {
            max_elements: u64::MAX,
        };
        let mut f = frame(Codec::None, &[1.0, 2.0]);
        f[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let body = f.len() - 4;
        let crc = crc32c::crc32c(&f[..body]);
        f[body..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Envelope::parse(&chain(1, 2, &[f.clone()]), &limits),
            Err(EnvelopeError::Frame {
                index: 0,
                source: DecodeError::PayloadLength { .. }
            })
        ));
        // A payload length matching the claim runs past the bytes present.
        f[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        f[8..16].copy_from_slice(&(u64::from(u32::MAX) / 4).to_le_bytes());
        assert!(matches!(
            Envelope::parse(&chain(1, 2, &[f]), &limits),
            Err(EnvelopeError::Frame {
                index: 0,
                source: DecodeError::Truncated { .. }
            })
        ));
    }

    #[test]
    fn a_huge_declared_count_costs_only_what_is_present() {
        // count = 2^32 - 1 agrees with the versions; the parse stops at the
        // first missing frame without allocating for the declared count.
        let mut out = Vec::new();
        EnvelopeHeader::chain(0, 5, 1, 1 + u64::from(u32::MAX))
            .unwrap()
            .write(&mut out);
        out.extend_from_slice(&frame(three_lc(), &[1.0]));
        assert!(matches!(
            Envelope::parse(&out, &Limits::default()),
            Err(EnvelopeError::Frame { index: 1, .. })
        ));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic sweep: every prefix and every single-byte
        // corruption of a valid envelope parses or fails, never panics.
        let limits = Limits { max_elements: 64 };
        let good = chain(
            1,
            3,
            &[
                frame(three_lc(), &[1.0, -2.0, 3.0]),
                frame(Codec::None, &[0.0, 1.0, 2.0]),
            ],
        );
        for len in 0..good.len() {
            let _ = Envelope::parse(&good[..len], &limits);
        }
        for at in 0..good.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                let _ = Envelope::parse(&bad, &limits);
                reseal(&mut bad);
                let _ = Envelope::parse(&bad, &limits);
            }
        }
    }
}
