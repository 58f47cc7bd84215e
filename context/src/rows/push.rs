//! The push side of row contexts: [`RowErrors`], the holder's error buffer
//! per row id for one pushed IndexedSlices values tensor, and
//! [`restore_push`], the requester's stateless decode.

use std::time::Instant;

use tlc_codec::{Codec, Encoder, EntropyStage, Feedback};
use tlc_wire::envelope::{Envelope, EnvelopeError, EnvelopeHeader, Kind, MAX_PUSH_FRAMES};
use tlc_wire::rows::{ids_hash, RowsSection};

use super::store::RowStore;
use super::{
    add_passes, check_ids, check_values, decode_own, refine_passes, rows_of, section_u32,
    IdScratch, PassBuffers, RowScratch, RowsApplied, RowsEncoded, RowsError, Uniques,
};
use crate::refine::{set_frame_count, sum_of_squares, Refinement};
use crate::table::ContextMemory;

/// The holder's error buffer per row id for one pushed IndexedSlices values
/// tensor whose consumer sums duplicate ids (SparseAccumulatorApplyGradient,
/// ScatterAdd, UnsortedSegmentSum).
///
/// Each push sends one row per distinct id, the sum of that id's values
/// plus the error the row carried; what the codec could not send stays as
/// the row's error until the id is pushed again. Rows untouched for longest
/// are evicted past `max_rows`, by a step counter, their error lost.
#[derive(Debug, Clone)]
pub struct RowErrors {
    step: u64,
    store: RowStore,
    entropy: EntropyStage,
    refine: Refinement,
}

impl RowErrors {
    /// No errors yet, for rows of `dim` values, at most `max_rows` of them.
    pub fn new(dim: usize, max_rows: usize) -> RowErrors {
        RowErrors {
            step: 0,
            store: RowStore::new(dim, max_rows),
            entropy: EntropyStage::Off,
            refine: Refinement::OFF,
        }
    }

    /// Whether frames from now on may carry the entropy stage.
    pub fn set_entropy_stage(&mut self, stage: EntropyStage) {
        self.entropy = stage;
    }

    /// How much error a push may leave behind from now on: further passes
    /// over it while it is above `refine.target` times the pushed rows'
    /// norm (the values summed per id), each at 3LC's own scale, at most
    /// `refine.max_passes` frames in all (and 8). A dense tensor's error
    /// goes out with the next step's gradient; a row's waits until the row
    /// is pushed again, which for most rows of a table is many steps away.
    pub fn set_refinement(&mut self, refine: Refinement) {
        self.refine = refine;
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.store.dim()
    }

    /// Rows with an error buffer.
    pub fn rows(&self) -> usize {
        self.store.rows()
    }

    /// Memory held: error values, per-row overhead (id, step, map entry),
    /// and the struct itself. Bounded through `max_rows`.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<RowErrors>() + self.store.bytes()
    }

    /// Rows evicted so far (their error lost).
    pub fn evictions(&self) -> u64 {
        self.store.evictions()
    }

    /// The error carried for `id`, if any.
    pub fn error(&self, id: i64) -> Option<&[f32]> {
        self.store.get(id).map(|slot| self.store.row(slot))
    }

    /// Sums the values of duplicate ids per distinct id (first-appearance
    /// order, additions in position order), adds each row's carried error,
    /// encodes the distinct rows as one frame with `codec` (3LC), keeps
    /// `sum + error − decoded` as each row's new error, and appends a
    /// rows-push envelope to `out`.
    ///
    /// On error (more distinct ids than `max_rows`, a value the codec
    /// refuses) the errors and `out` are as they were, and the caller
    /// sends the values with the stateless codec.
    pub fn encode(
        &mut self,
        ids: &[i64],
        values: &[f32],
        codec: &Codec,
        fallback_token: u64,
        uniques: &mut Uniques,
        out: &mut Vec<u8>,
    ) -> Result<RowsEncoded, RowsError> {
        let started = Instant::now();
        let dim = self.store.dim();
        check_values(ids, values, dim)?;
        let max_rows = self.store.max_rows();
        let Uniques { ids: u, rows: s } = uniques;
        u.compute(ids);
        let unique = u.unique.len();
        if unique > max_rows {
            return Err(RowsError::TooManyRows { unique, max_rows });
        }
        let section = RowsSection {
            ids_hash: ids_hash(ids),
            positions: section_u32("positions", ids.len())?,
            unique: section_u32("unique", unique)?,
            hits: 0,
            dim: section_u32("dim", dim)?,
            max_rows: 0,
        };
        let pushed_squares = self.accumulate(u, values, s);
        let passes = self.write_frames(codec, fallback_token, (section, pushed_squares), s, out)?;
        let evicted = self.keep_errors(u, s);
        Ok(RowsEncoded {
            unique,
            hits: 0,
            evicted,
            refinements: passes,
            took: started.elapsed(),
        })
    }

    /// Into `s.keys`: each distinct id's values summed (as the consuming op
    /// would) plus the error its row carries; the rows held and new in
    /// `s.held` and `s.new`. Returns the squares of what is pushed, before
    /// the carried errors (what refinement measures against).
    fn accumulate(&self, u: &IdScratch, values: &[f32], s: &mut RowScratch) -> f64 {
        let dim = self.store.dim();
        s.keys.clear();
        s.keys.resize(u.unique.len() * dim, 0.0);
        for (&j, row) in u.index.iter().zip(values.chunks_exact(dim)) {
            let at = j as usize * dim;
            for (a, v) in s.keys[at..at + dim].iter_mut().zip(row) {
                *a += *v;
            }
        }
        let pushed_squares = sum_of_squares(s.keys.iter().copied());
        s.held.clear();
        s.new.clear();
        for ((j, &id), acc) in (0u32..).zip(&u.unique).zip(s.keys.chunks_exact_mut(dim)) {
            match self.store.get(id) {
                Some(slot) => {
                    for (a, e) in acc.iter_mut().zip(self.store.row(slot)) {
                        *a += *e;
                    }
                    s.held.push((j, slot));
                }
                None => s.new.push(j),
            }
        }
        pushed_squares
    }

    /// The envelope of `s.keys` into `out`: the header, the rows section,
    /// the first frame and the refinement passes the bound asks for, with
    /// what they decode to in `s.deltas`. Nothing is written on an error.
    fn write_frames(
        &self,
        codec: &Codec,
        fallback_token: u64,
        (section, pushed_squares): (RowsSection, f64),
        s: &mut RowScratch,
        out: &mut Vec<u8>,
    ) -> Result<u32, RowsError> {
        let start = out.len();
        let mut header = EnvelopeHeader::rows_push(fallback_token);
        header.write(out);
        section.write(out);
        let frame = out.len();
        let mut encoder = Encoder::new(*codec, Feedback::Off);
        encoder.set_entropy_stage(self.entropy);
        let encoded = encoder
            .encode(&s.keys, out)
            .map_err(RowsError::from)
            .and_then(|_| {
                s.deltas.resize(s.keys.len(), 0.0);
                decode_own(&out[frame..], &mut s.deltas)
            });
        if let Err(err) = encoded {
            out.truncate(start);
            return Err(err);
        }
        s.residual.clear();
        s.residual
            .extend(s.keys.iter().zip(&s.deltas).map(|(a, d)| a - d));
        let refine = Refinement {
            max_passes: self.refine.max_passes.min(MAX_PUSH_FRAMES),
            ..self.refine
        };
        let buffers = PassBuffers {
            sent: &mut s.deltas,
            residual: &mut s.residual,
            pass: &mut s.pass,
        };
        let passes = refine_passes(refine, codec, self.entropy, pushed_squares, buffers, out);
        if passes > 0 {
            set_frame_count(&mut header, 1 + passes, start, out);
        }
        Ok(passes)
    }

    /// Keeps what each row's push left unsent (`s.keys` less `s.deltas`)
    /// as its error, touched at this step, the new rows within the bound;
    /// returns the rows evicted for them. Nothing here fails.
    fn keep_errors(&mut self, u: &IdScratch, s: &mut RowScratch) -> usize {
        let dim = self.store.dim();
        self.step += 1;
        let step = self.step;
        for &(j, slot) in &s.held {
            let at = j as usize * dim;
            let (acc, sent) = (&s.keys[at..at + dim], &s.deltas[at..at + dim]);
            for ((e, a), d) in self.store.row_mut(slot).iter_mut().zip(acc).zip(sent) {
                *e = *a - *d;
            }
            self.store.touch(slot, step);
        }
        let evicted = self
            .store
            .evict(step, s.new.len(), u.unique.len(), &mut s.versions);
        // The new rows' errors, computed into the accumulator in place
        // (it is not needed any more).
        for &j in &s.new {
            let at = j as usize * dim;
            let (acc, sent) = (&mut s.keys[at..at + dim], &s.deltas[at..at + dim]);
            for (a, d) in acc.iter_mut().zip(sent) {
                *a -= *d;
            }
            self.store.insert(u.unique[j as usize], step, acc);
        }
        evicted
    }
}

impl ContextMemory for RowErrors {
    fn memory_bytes(&self) -> usize {
        self.bytes()
    }
}

/// Requester of a push: decodes a parsed rows-push envelope for `ids` into
/// `ids.len() * dim` values in `values_out` (cleared first): each distinct
/// id's decoded row at the id's first position, zeros at its later
/// duplicates, so that a consumer summing duplicate ids gets the decoded
/// row per id. Checks first that the ids are the envelope's (count, hash,
/// distinct ids). On error `values_out` is unspecified and the caller falls
/// back to the original response.
pub fn restore_push(
    ids: &[i64],
    envelope: &Envelope<'_>,
    uniques: &mut Uniques,
    values_out: &mut Vec<f32>,
) -> Result<RowsApplied, RowsError> {
    let (h, section) = rows_of(envelope, Kind::RowsPush)?;
    let Uniques { ids: u, rows: s } = uniques;
    let unique = check_ids(&section, ids, u)?;
    let Some(frame) = envelope.frames().first() else {
        return Err(RowsError::Envelope(EnvelopeError::FrameCount {
            kind: h.kind,
            declared: h.frame_count,
            expected: 1,
        }));
    };
    // Envelope::parse bounded unique·dim and positions·dim by the caller's
    // limits and checked the frame holds unique·dim values.
    let dim = usize::try_from(section.dim).map_err(|_| RowsError::TooLarge {
        what: "dim",
        value: usize::MAX,
    })?;
    s.keys.resize(unique * dim, 0.0);
    frame.decode_into(&mut s.keys)?;
    add_passes(&envelope.frames()[1..], &mut s.keys, &mut s.pass)?;
    values_out.clear();
    values_out.resize(ids.len() * dim, 0.0);
    // Distinct ids are numbered in first-appearance order: a position is
    // its id's first exactly when its index is the next number.
    let mut next = 0u32;
    for (&j, out) in u.index.iter().zip(values_out.chunks_exact_mut(dim)) {
        if j == next {
            let at = j as usize * dim;
            out.copy_from_slice(&s.keys[at..at + dim]);
            next += 1;
        }
    }
    Ok(RowsApplied {
        unique,
        hits: 0,
        evicted: 0,
    })
}
