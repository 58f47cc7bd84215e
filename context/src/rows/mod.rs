//! Row contexts: state kept per row id for tensors whose rows change from
//! step to step but whose row ids both sidecars know.
//!
//! Embedding rows (the output of a `Gather` on a parameter server, pulled
//! by workers) and IndexedSlices gradient values (pushed by workers) hold
//! different rows every step, so a per-tensor context has nothing to work
//! with; but row `r` of a table is row `r` in every step, and both sidecars
//! hold the int64 lookup ids that crossed just before (one per position,
//! duplicates allowed). So:
//!
//! - pulls: a [`RowMirror`] per requester and gathered tensor, kept
//!   bit-identically by both sidecars: rows the requester holds cross as
//!   deltas (3LC), new rows as keyframes (lossless or fp16), and both sides
//!   evict the same rows at the same version without talking;
//! - pushes: a [`RowErrors`] per pushed values tensor on the holder (the
//!   worker), carrying each row's quantization error to the next time the
//!   row is pushed; the requester needs no state ([`restore_push`]).
//!
//! They travel as envelope kinds 4 and 5 (`tlc_wire::rows`,
//! `wire/ENVELOPE.md`). [`Uniques`] is the scratch every call reuses.

use std::collections::hash_map::Entry;
use std::time::Duration;

use thiserror::Error;
use tlc_codec::{Codec, DecodeError, EncodeError, Encoder, EntropyStage, Feedback};
use tlc_wire::envelope::{Envelope, EnvelopeError, EnvelopeHeader, Kind};

use crate::refine::{relative_to, sum_of_squares, Refinement};
use tlc_wire::rows::{ids_hash, RowsSection};

mod mirror;
mod push;
mod store;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_push;

pub use mirror::RowMirror;
pub use push::{restore_push, RowErrors};
use store::IdMap;

/// Unique ids in first-appearance order and, per position, the index of
/// its unique id; also the scratch buffers the row contexts reuse from
/// call to call (keep one per thread, or per context).
#[derive(Debug, Clone, Default)]
pub struct Uniques {
    ids: IdScratch,
    rows: RowScratch,
}

/// The header and rows section of `envelope`, which must be of `kind`.
fn rows_of(
    envelope: &Envelope<'_>,
    kind: Kind,
) -> Result<(EnvelopeHeader, RowsSection), RowsError> {
    let header = envelope.header;
    if header.kind != kind {
        return Err(RowsError::WrongKind {
            expected: kind,
            got: header.kind,
        });
    }
    let section = envelope.rows().ok_or(RowsError::NoSection)?;
    Ok((header, section))
}

/// Checks `ids`, the requester's, against what a rows `section` says of
/// them (count, hash, distinct ids), computing their distinct ids into
/// `u` on the way; returns how many are distinct.
fn check_ids(section: &RowsSection, ids: &[i64], u: &mut IdScratch) -> Result<usize, RowsError> {
    if u64::from(section.positions) != ids.len() as u64 {
        return Err(RowsError::Positions {
            have: ids.len(),
            got: section.positions,
        });
    }
    let hash = ids_hash(ids);
    if hash != section.ids_hash {
        return Err(RowsError::IdsHash {
            have: hash,
            got: section.ids_hash,
        });
    }
    u.compute(ids);
    let unique = u.unique.len();
    if unique as u64 != u64::from(section.unique) {
        return Err(RowsError::Unique {
            have: unique,
            got: section.unique,
        });
    }
    Ok(unique)
}

/// The result of [`Uniques::compute`], kept between calls.
#[derive(Debug, Clone, Default)]
struct IdScratch {
    map: IdMap<u32>,
    unique: Vec<i64>,
    /// Position → index into `unique`.
    index: Vec<u32>,
    /// Unique index → its first position.
    first: Vec<u32>,
}

/// Buffers of the row contexts, reused from call to call.
#[derive(Debug, Clone, Default)]
struct RowScratch {
    /// New rows' values (rows pull), or the rows to push.
    keys: Vec<f32>,
    /// Held rows' deltas (rows pull), or the decoded pushed rows.
    deltas: Vec<f32>,
    /// What the passes so far left of the deltas or rows to send.
    residual: Vec<f32>,
    /// One refinement pass, decoded.
    pass: Vec<f32>,
    /// Unique indices of the new rows, in first-appearance order.
    new: Vec<u32>,
    /// (unique index, slot) of the held rows, in first-appearance order.
    held: Vec<(u32, u32)>,
    /// Unique index → slot, once the rows are in place.
    slots: Vec<u32>,
    /// Eviction scratch.
    versions: Vec<u64>,
}

impl Uniques {
    /// Empty scratch.
    pub fn new() -> Self {
        Uniques::default()
    }

    /// The distinct ids of `ids` in first-appearance order, and per
    /// position the index of its id among them. (The callers in this
    /// module refuse more than `u32::MAX` ids before calling this.)
    pub fn compute(&mut self, ids: &[i64]) -> (&[i64], &[u32]) {
        self.ids.compute(ids);
        (&self.ids.unique, &self.ids.index)
    }
}

impl IdScratch {
    fn compute(&mut self, ids: &[i64]) {
        self.map.clear();
        self.unique.clear();
        self.index.clear();
        self.first.clear();
        self.index.reserve(ids.len());
        for (position, &id) in ids.iter().enumerate() {
            let next = u32::try_from(self.unique.len()).unwrap_or(u32::MAX);
            match self.map.entry(id) {
                Entry::Occupied(e) => self.index.push(*e.get()),
                Entry::Vacant(e) => {
                    e.insert(next);
                    self.unique.push(id);
                    self.first.push(u32::try_from(position).unwrap_or(u32::MAX));
                    self.index.push(next);
                }
            }
        }
    }
}

/// What one [`RowMirror::encode`] or [`RowErrors::encode`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsEncoded {
    /// Distinct ids in the tensor.
    pub unique: usize,
    /// Of those, rows the mirror held (sent as deltas); 0 for a push.
    pub hits: usize,
    /// Rows evicted after this envelope.
    pub evicted: usize,
    /// Refinement passes sent after the first pass.
    pub refinements: u32,
    /// Time spent encoding.
    pub took: Duration,
}

/// What one [`RowMirror::apply`] or [`restore_push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsApplied {
    /// Distinct ids in the tensor.
    pub unique: usize,
    /// Of those, rows the mirror held; 0 for a push.
    pub hits: usize,
    /// Rows evicted after this envelope; 0 for a push.
    pub evicted: usize,
}

/// Why rows could not be encoded or restored. Every variant leaves the
/// context as it was: the holder sends the tensor another way (the
/// stateless codec), the requester falls back to the original response.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RowsError {
    /// Rows of no values.
    #[error("a row needs at least one value (dim 0)")]
    ZeroDim,
    /// The values are not one row of `dim` per id.
    #[error("{ids} ids of {dim} values need {expected} values, got {values}")]
    ValuesLength {
        /// Ids given.
        ids: usize,
        /// Values per row.
        dim: usize,
        /// `ids * dim`, saturated.
        expected: usize,
        /// Values given.
        values: usize,
    },
    /// More distinct ids than the context's row bound: the caller uses the
    /// stateless codec.
    #[error("{unique} distinct ids exceed the row bound of {max_rows}")]
    TooManyRows {
        /// Distinct ids in the tensor.
        unique: usize,
        /// The bound.
        max_rows: usize,
    },
    /// A count that does not fit the rows section's u32 fields.
    #[error("{what} of {value} does not fit a rows section")]
    TooLarge {
        /// What was counted.
        what: &'static str,
        /// The count.
        value: usize,
    },
    /// An envelope of another kind than the call expects.
    #[error("expected a {expected} envelope, got a {got}")]
    WrongKind {
        /// The kind expected.
        expected: Kind,
        /// The kind received.
        got: Kind,
    },
    /// A rows envelope without its rows section (not one from
    /// `Envelope::parse`).
    #[error("rows envelope without a rows section")]
    NoSection,
    /// A rows pull of another epoch than the mirror's.
    #[error("rows pull of epoch {got:#x}, the mirror's is {have:#x}")]
    Epoch {
        /// The mirror's epoch.
        have: u64,
        /// The envelope's.
        got: u64,
    },
    /// A rows pull from another version than the mirror's.
    #[error("rows pull from version {need}, the mirror is at {have}")]
    Base {
        /// The mirror's version.
        have: u64,
        /// The envelope's base version.
        need: u64,
    },
    /// Rows of another length than the mirror's.
    #[error("rows of {got} values, the mirror's have {have}")]
    Dim {
        /// The mirror's row length.
        have: usize,
        /// The envelope's.
        got: u32,
    },
    /// Another row bound than the mirror's.
    #[error("row bound {got}, the mirror's is {have}")]
    MaxRows {
        /// The mirror's bound.
        have: usize,
        /// The envelope's.
        got: u32,
    },
    /// A row bound above what the requester accepts.
    #[error("row bound {got} is above this side's limit of {limit}")]
    RowBound {
        /// The envelope's bound.
        got: u32,
        /// The requester's limit.
        limit: usize,
    },
    /// The envelope is for another number of ids.
    #[error("envelope for {got} ids, {have} here")]
    Positions {
        /// Ids here.
        have: usize,
        /// The envelope's.
        got: u32,
    },
    /// The envelope is for other ids.
    #[error("envelope ids hash {got:#018x}, these ids hash to {have:#018x}")]
    IdsHash {
        /// Hash of the ids here.
        have: u64,
        /// The envelope's.
        got: u64,
    },
    /// The envelope counts other distinct ids.
    #[error("envelope for {got} distinct ids, {have} here")]
    Unique {
        /// Distinct ids here.
        have: usize,
        /// The envelope's.
        got: u32,
    },
    /// The envelope counts other held rows than this mirror holds.
    #[error("envelope for {got} held rows, the mirror holds {have} of these ids")]
    Hits {
        /// Held rows here.
        have: usize,
        /// The envelope's.
        got: u32,
    },
    /// The codec refused the rows (a NaN or an infinity, say).
    #[error("cannot encode rows: {0}")]
    Encode(#[from] EncodeError),
    /// A frame's payload does not decode.
    #[error("rows frame does not decode: {0}")]
    Decode(#[from] DecodeError),
    /// An envelope header from the context's own state was refused (a
    /// version at its end, an epoch 0).
    #[error("rows envelope: {0}")]
    Envelope(#[from] EnvelopeError),
}

/// `u32` of a count for the rows section.
fn section_u32(what: &'static str, value: usize) -> Result<u32, RowsError> {
    u32::try_from(value).map_err(|_| RowsError::TooLarge { what, value })
}

/// Checks that `values` is one row of `dim` per id.
fn check_values(ids: &[i64], values: &[f32], dim: usize) -> Result<(), RowsError> {
    if dim == 0 {
        return Err(RowsError::ZeroDim);
    }
    let expected = ids.len().saturating_mul(dim);
    if values.len() != expected || ids.len().checked_mul(dim).is_none() {
        return Err(RowsError::ValuesLength {
            ids: ids.len(),
            dim,
            expected,
            values: values.len(),
        });
    }
    section_u32("positions", ids.len())?;
    Ok(())
}

/// Appends refinement passes while `refine` asks for them: each pass is
/// `residual` encoded with `codec` as one frame (3LC at its own scale, or
/// toward the target: [`Refinement::pass_goal`]), decoded into `pass`, then
/// added to `sent` and taken from `residual`, element by element (the
/// order the receiver's [`add_passes`] repeats). `reference_squares` is
/// `Σ v²` of what the error is measured against. Returns the passes
/// appended; a pass the codec refuses ends them (those before stand).
fn refine_passes(
    refine: Refinement,
    codec: &Codec,
    entropy: EntropyStage,
    reference_squares: f64,
    bufs: PassBuffers<'_>,
    out: &mut Vec<u8>,
) -> u32 {
    let PassBuffers {
        sent,
        residual,
        pass,
    } = bufs;
    let mut passes = 1;
    while refine.another_pass(
        passes,
        relative_to(sum_of_squares(residual.iter().copied()), reference_squares),
    ) {
        let start = out.len();
        let mut encoder = Encoder::new(*codec, Feedback::Off);
        encoder.set_entropy_stage(entropy);
        pass.clear();
        pass.resize(residual.len(), 0.0);
        let encoded = encoder
            .encode_pass(residual, refine.pass_goal(reference_squares), out)
            .map_err(RowsError::from)
            .and_then(|_| decode_own(&out[start..], pass));
        if encoded.is_err() {
            out.truncate(start);
            break;
        }
        for ((s, r), p) in sent.iter_mut().zip(residual.iter_mut()).zip(pass.iter()) {
            *s += *p;
            *r -= *p;
        }
        passes += 1;
    }
    passes - 1
}

/// The buffers of [`refine_passes`]: what was sent so far (decoded), what
/// is left, and scratch for one pass.
struct PassBuffers<'a> {
    sent: &'a mut [f32],
    residual: &'a mut [f32],
    pass: &'a mut Vec<f32>,
}

/// Receiver: decodes each frame of `frames` into `pass` and adds it to
/// `sum`, element by element, in frame order: the sums the sender made.
fn add_passes(
    frames: &[tlc_codec::Frame<'_>],
    sum: &mut [f32],
    pass: &mut Vec<f32>,
) -> Result<(), RowsError> {
    for frame in frames {
        pass.clear();
        pass.resize(sum.len(), 0.0);
        frame.decode_into(pass)?;
        for (s, p) in sum.iter_mut().zip(pass.iter()) {
            *s += *p;
        }
    }
    Ok(())
}

/// A frame this side just encoded, decoded into `into` (whose length is
/// the frame's) exactly as the requester will decode it.
fn decode_own(frame: &[u8], into: &mut [f32]) -> Result<(), RowsError> {
    let limits = tlc_codec::Limits {
        max_elements: into.len() as u64,
    };
    tlc_codec::Frame::parse(frame, &limits)?.decode_into(into)?;
    Ok(())
}
