//! The rows section of the two rows envelope kinds (`4` rows pull, `5` rows
//! push): gathered embedding rows and IndexedSlices gradient values, whose
//! state is kept per row id rather than per tensor.
//!
//! The section sits between the 48-byte envelope header and the frames and
//! says which ids the frames are for (by hash: both sidecars hold the ids
//! already), how many rows they carry and how long a row is. Layout, 32
//! bytes, little-endian (`wire/ENVELOPE.md` says the same in prose):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | ids_hash | xxh3-64 of the ids as i64 little-endian bytes, in position order |
//! | 8 | 4 | positions | `k`, ids (rows) in the tensor, duplicates included |
//! | 12 | 4 | unique | distinct ids |
//! | 16 | 4 | hits | rows pull: distinct ids the mirror held before; rows push: 0 |
//! | 20 | 4 | dim | values per row, ≥ 1 |
//! | 24 | 4 | max_rows | rows pull: the mirror's row bound; rows push: 0 |
//! | 28 | 4 | crc32c | CRC-32C of bytes `0..28` of the section |
//!
//! The envelope parser checks the section ([`RowsSection::parse`],
//! [`RowsSection::check`]) and the frames' element counts
//! ([`RowsSection::frame_elements`]) before any state changes. This module
//! knows nothing of the envelope around the section: the envelope maps its
//! kinds to [`RowsKind`] and its errors from [`SectionError`].

use tlc_codec::Limits;
use xxhash_rust::xxh3::Xxh3Default;

/// Which rows envelope a section belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsKind {
    /// Kind 4: gathered rows through a mirror.
    Pull,
    /// Kind 5: gradient rows, one per distinct id.
    Push,
}

/// Why a rows section is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SectionError {
    /// Fewer bytes than a section.
    #[error("rows section truncated: {available} of {needed} bytes")]
    Truncated {
        /// Bytes a section needs.
        needed: usize,
        /// Bytes there were.
        available: usize,
    },
    /// The section's checksum does not match.
    #[error("rows section checksum {stored:#010x} does not match {computed:#010x}")]
    Checksum {
        /// The checksum in the section.
        stored: u32,
        /// The checksum of its bytes.
        computed: u32,
    },
    /// A field breaks a rule.
    #[error("rows section: {reason}")]
    Rule {
        /// Which rule.
        reason: &'static str,
    },
    /// More values than the caller's limit.
    #[error("{rows} rows of {dim} values are more than {limit} values")]
    TooLarge {
        /// Rows.
        rows: u32,
        /// Values per row.
        dim: u32,
        /// The caller's limit.
        limit: u64,
    },
}

/// Bytes of the rows section.
pub const ROWS_SECTION_LEN: usize = 32;
/// Bytes covered by the section checksum.
const ROWS_CHECKED_LEN: usize = 28;

/// The rows section of a rows envelope (kinds 4 and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowsSection {
    /// [`ids_hash`] of the tensor's ids.
    pub ids_hash: u64,
    /// Ids (rows) in the tensor, duplicates included.
    pub positions: u32,
    /// Distinct ids.
    pub unique: u32,
    /// Rows pull: distinct ids the requester's mirror held before this
    /// envelope (sent as deltas). Rows push: 0.
    pub hits: u32,
    /// Values per row (≥ 1).
    pub dim: u32,
    /// Rows pull: the mirror's row bound, applied by both sides. Rows
    /// push: 0.
    pub max_rows: u32,
}

impl RowsSection {
    /// Distinct ids the frames carry as new rows (keyframes):
    /// `unique - hits`, or 0 for a section that breaks `hits <= unique`.
    pub fn new_rows(&self) -> u32 {
        self.unique.saturating_sub(self.hits)
    }

    /// Appends the 32 section bytes (fields and checksum) to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.ids_hash.to_le_bytes());
        for field in [
            self.positions,
            self.unique,
            self.hits,
            self.dim,
            self.max_rows,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads the section at the start of `bytes` and checks what holds for
    /// every kind: the checksum, `dim >= 1`, `hits <= unique <= positions`,
    /// and `unique == 0` exactly when `positions == 0`.
    pub fn parse(bytes: &[u8]) -> Result<RowsSection, SectionError> {
        let section = bytes
            .get(..ROWS_SECTION_LEN)
            .ok_or(SectionError::Truncated {
                needed: ROWS_SECTION_LEN,
                available: bytes.len(),
            })?;
        let u32_at = |at: usize| {
            u32::from_le_bytes([
                section[at],
                section[at + 1],
                section[at + 2],
                section[at + 3],
            ])
        };
        let stored = u32_at(ROWS_CHECKED_LEN);
        let computed = crc32c::crc32c(&section[..ROWS_CHECKED_LEN]);
        if stored != computed {
            return Err(SectionError::Checksum { stored, computed });
        }
        let mut hash = [0u8; 8];
        hash.copy_from_slice(&section[..8]);
        let parsed = RowsSection {
            ids_hash: u64::from_le_bytes(hash),
            positions: u32_at(8),
            unique: u32_at(12),
            hits: u32_at(16),
            dim: u32_at(20),
            max_rows: u32_at(24),
        };
        let rule = |ok: bool, reason: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(SectionError::Rule { reason })
            }
        };
        rule(parsed.dim >= 1, "a row has at least one value (dim >= 1)")?;
        rule(parsed.hits <= parsed.unique, "more hits than distinct ids")?;
        rule(
            parsed.unique <= parsed.positions,
            "more distinct ids than ids",
        )?;
        rule(
            (parsed.unique == 0) == (parsed.positions == 0),
            "ids without a distinct id",
        )?;
        Ok(parsed)
    }

    /// Checks the rules of the envelope's kind and the caller's limits:
    /// a rows pull's `unique <= max_rows` and, from base version 0 (an
    /// empty mirror), no hits; a rows push's `hits == 0` and
    /// `max_rows == 0`; for both, `unique * dim` and `positions * dim`
    /// within `limits.max_elements`.
    pub fn check(
        &self,
        kind: RowsKind,
        base_version: u64,
        limits: &Limits,
    ) -> Result<(), SectionError> {
        let rule = |ok: bool, reason: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(SectionError::Rule { reason })
            }
        };
        match kind {
            RowsKind::Pull => {
                rule(
                    self.unique <= self.max_rows,
                    "more distinct ids than the mirror's row bound",
                )?;
                rule(
                    base_version != 0 || self.hits == 0,
                    "hits in a mirror that starts empty (base version 0)",
                )?;
            }
            RowsKind::Push => {
                rule(self.hits == 0, "a rows push has no hits")?;
                rule(self.max_rows == 0, "a rows push has no row bound")?;
            }
        }
        for rows in [self.unique, self.positions] {
            let within = u64::from(rows)
                .checked_mul(u64::from(self.dim))
                .is_some_and(|n| n <= limits.max_elements);
            if !within {
                return Err(SectionError::TooLarge {
                    rows,
                    dim: self.dim,
                    limit: limits.max_elements,
                });
            }
        }
        Ok(())
    }

    /// The element count frame `index` of a `kind` envelope must have:
    /// rows pull, frame 0 the new rows' keyframes `(unique - hits) * dim`,
    /// every later frame a pass over the held rows' deltas `hits * dim`;
    /// rows push, every frame a pass over the distinct rows `unique * dim`.
    /// Computed in u64 (the fields are u32, so the products cannot overflow).
    pub fn frame_elements(&self, kind: RowsKind, index: u32) -> u64 {
        let dim = u64::from(self.dim);
        match (kind, index) {
            (RowsKind::Pull, 0) => u64::from(self.new_rows()) * dim,
            (RowsKind::Pull, _) => u64::from(self.hits) * dim,
            (RowsKind::Push, _) => u64::from(self.unique) * dim,
        }
    }
}

/// xxh3-64 of `ids` as i64 little-endian bytes, in position order: what
/// [`RowsSection::ids_hash`] holds, and how a receiver checks that its
/// ids are the sender's.
pub fn ids_hash(ids: &[i64]) -> u64 {
    let mut hasher = Xxh3Default::new();
    // Through a stack buffer: no unsafe casts, no allocation, the same
    // bytes on every platform.
    let mut buf = [0u8; 4096];
    for chunk in ids.chunks(buf.len() / 8) {
        for (dst, id) in buf.chunks_exact_mut(8).zip(chunk) {
            dst.copy_from_slice(&id.to_le_bytes());
        }
        hasher.update(&buf[..chunk.len() * 8]);
    }
    hasher.digest()
}
