//! The pull side of row contexts: a [`RowMirror`] of the rows one
//! requester holds of one gathered tensor, kept bit-identically by the
//! holder (which encodes against it) and the requester (which applies to
//! it and hands TensorFlow its rows).

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

/// The rows one requester holds of one gathered tensor, kept identically
/// by both sidecars.
///
/// An `(epoch, version)` pair names one mirror value. Each rows pull takes
/// the mirror one version further: the rows of the envelope's ids become
/// the decoded keyframe (new ids) or the old row plus the decoded delta
/// (held ids), all touched at the new version; then, past `max_rows`
/// rows, both sides evict the same rows (`wire/ENVELOPE.md`, "Rows
/// section"). A mirror whose requester falls out of step (a lost or
/// refused envelope) is replaced by an empty one (version 0) on both
/// sides: the requester announces none, the holder makes a new one.
#[derive(Debug, Clone)]
pub struct RowMirror {
    epoch: u64,
    version: u64,
    store: RowStore,
    entropy: EntropyStage,
    refine: Refinement,
}

impl RowMirror {
    /// An empty mirror (version 0) of rows of `dim` values, at most
    /// `max_rows` of them; `epoch` (never 0) names the holder's mirror
    /// stream, as a pull source's does.
    pub fn new(epoch: u64, dim: usize, max_rows: usize) -> RowMirror {
        RowMirror {
            epoch,
            version: 0,
            store: RowStore::new(dim, max_rows),
            entropy: EntropyStage::Off,
            refine: Refinement::OFF,
        }
    }

    /// Whether frames from now on may carry the entropy stage (the holder's
    /// side; the requester reads either).
    pub fn set_entropy_stage(&mut self, stage: EntropyStage) {
        self.entropy = stage;
    }

    /// How far the held rows may lag from now on (the holder's side): after
    /// the deltas' pass, further passes over what it left while that is
    /// above `refine.target` times the held rows' norm, each at 3LC's own
    /// scale, at most `refine.max_passes` in all (and 7). Without them a
    /// row's small changes wait in the gap until they add up, as a dense
    /// replica's do, and the requester computes on stale rows.
    pub fn set_refinement(&mut self, refine: Refinement) {
        self.refine = refine;
    }

    /// Requester: the empty mirror a rows pull from version 0 applies to,
    /// with the envelope's epoch, row length and row bound; refused if the
    /// bound is above `max_rows_limit` (this side's memory budget) or the
    /// envelope is not a rows pull from version 0.
    pub fn for_envelope(
        envelope: &Envelope<'_>,
        max_rows_limit: usize,
    ) -> Result<RowMirror, RowsError> {
        let (h, section) = rows_of(envelope, Kind::RowsPull)?;
        if h.base_version != 0 {
            return Err(RowsError::Base {
                have: 0,
                need: h.base_version,
            });
        }
        let bound = usize::try_from(section.max_rows).unwrap_or(usize::MAX);
        if bound > max_rows_limit {
            return Err(RowsError::RowBound {
                got: section.max_rows,
                limit: max_rows_limit,
            });
        }
        let dim = usize::try_from(section.dim).unwrap_or(usize::MAX);
        Ok(RowMirror::new(h.epoch, dim, bound))
    }

    /// The holder's mirror stream this mirror belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Envelopes applied (0: empty, nothing applied yet).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.store.dim()
    }

    /// The row bound.
    pub fn max_rows(&self) -> usize {
        self.store.max_rows()
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.store.rows()
    }

    /// Memory held: row values, per-row overhead (id, version, map entry),
    /// and the struct itself. Bounded through `max_rows`.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<RowMirror>() + self.store.bytes()
    }

    /// Rows evicted so far.
    pub fn evictions(&self) -> u64 {
        self.store.evictions()
    }

    /// The row held for `id`, if any.
    pub fn row(&self, id: i64) -> Option<&[f32]> {
        self.store.get(id).map(|slot| self.store.row(slot))
    }

    /// Holder: encodes the rows for `ids` whose current values are
    /// `values` (`ids.len() * dim`, row-major) as one rows-pull envelope
    /// appended to `out`: header (`fallback_token`, the epoch, base =
    /// [`version`](Self::version), target = base + 1), rows section, the
    /// new rows' keyframes with `keyframe_codec` (`int8-rows` with a step
    /// per row of this table, or `none`, fp16, bf16), the
    /// held rows' deltas (current − mirror row) with `delta_codec` (3LC).
    /// A duplicated id's row is taken from its first position.
    ///
    /// Then updates the mirror exactly as the requester will after
    /// applying (from the decoded frames), bumps the version and evicts.
    /// On error (more distinct ids than `max_rows`, a value the codec
    /// refuses, ...) the mirror and `out` are as they were, and the caller
    /// sends the rows with the stateless codec.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &mut self,
        ids: &[i64],
        values: &[f32],
        keyframe_codec: &Codec,
        delta_codec: &Codec,
        fallback_token: u64,
        uniques: &mut Uniques,
        out: &mut Vec<u8>,
    ) -> Result<RowsEncoded, RowsError> {
        let started = Instant::now();
        let dim = self.store.dim();
        check_values(ids, values, dim)?;
        let max_rows = self.store.max_rows();
        let mut section = RowsSection {
            ids_hash: 0,
            positions: section_u32("positions", ids.len())?,
            unique: 0,
            hits: 0,
            dim: section_u32("dim", dim)?,
            max_rows: section_u32("max_rows", max_rows)?,
        };
        // wrapping_add: a mirror at u64::MAX gives target 0, refused.
        let mut header = EnvelopeHeader::rows_pull(
            fallback_token,
            self.epoch,
            self.version,
            self.version.wrapping_add(1),
        )?;
        let Uniques { ids: u, rows: s } = uniques;
        u.compute(ids);
        let unique = u.unique.len();
        if unique > max_rows {
            return Err(RowsError::TooManyRows { unique, max_rows });
        }
        partition(&self.store, &u.unique, s);
        let hits = s.held.len();
        let held_squares = self.split_rows(u, values, s);
        section.ids_hash = ids_hash(ids);
        section.unique = section_u32("unique", unique)?;
        section.hits = section_u32("hits", hits)?;
        let start = out.len();
        header.write(out);
        section.write(out);
        // A step per row of the table, not per block of the default length.
        let keyframe_codec = match keyframe_codec {
            Codec::Int8Rows { .. } => Codec::Int8Rows {
                row_len: section.dim,
            },
            other => *other,
        };
        if let Err(err) = encode_frames(&keyframe_codec, delta_codec, self.entropy, s, out) {
            out.truncate(start);
            return Err(err);
        }
        let passes = self.refine_deltas(delta_codec, held_squares, s, out);
        if passes > 0 {
            set_frame_count(&mut header, 2 + passes, start, out);
        }
        let evicted = self.update(&u.unique, s);
        Ok(RowsEncoded {
            unique,
            hits,
            evicted,
            refinements: passes,
            took: started.elapsed(),
        })
    }

    /// The rows of `values` by what the requester holds: new rows whole
    /// into `s.keys`, held rows as deltas from the mirror into `s.deltas`
    /// (and `s.residual`, what is left to send of them). Returns the squares
    /// of the held rows' values, which refinement measures against.
    fn split_rows(&self, u: &IdScratch, values: &[f32], s: &mut RowScratch) -> f64 {
        let dim = self.store.dim();
        s.keys.clear();
        for &j in &s.new {
            let at = u.first[j as usize] as usize * dim;
            s.keys.extend_from_slice(&values[at..at + dim]);
        }
        s.deltas.clear();
        let mut held_squares = 0.0;
        for &(j, slot) in &s.held {
            let at = u.first[j as usize] as usize * dim;
            let row = self.store.row(slot);
            s.deltas
                .extend(values[at..at + dim].iter().zip(row).map(|(v, r)| v - r));
            held_squares += sum_of_squares(values[at..at + dim].iter().copied());
        }
        s.residual.clear();
        s.residual.extend_from_slice(&s.deltas);
        held_squares
    }

    /// After the first frames (`s.deltas` now what they decode to): the
    /// further passes of the held rows' deltas the bound asks for, into
    /// `out`; returns how many.
    fn refine_deltas(
        &self,
        delta_codec: &Codec,
        held_squares: f64,
        s: &mut RowScratch,
        out: &mut Vec<u8>,
    ) -> u32 {
        for (r, d) in s.residual.iter_mut().zip(&s.deltas) {
            *r -= *d;
        }
        let refine = Refinement {
            max_passes: self.refine.max_passes.min(MAX_PUSH_FRAMES - 1),
            ..self.refine
        };
        let buffers = PassBuffers {
            sent: &mut s.deltas,
            residual: &mut s.residual,
            pass: &mut s.pass,
        };
        refine_passes(
            refine,
            delta_codec,
            self.entropy,
            held_squares,
            buffers,
            out,
        )
    }

    /// Requester: applies a parsed rows-pull envelope for `ids` and writes
    /// the `ids.len() * dim` values TensorFlow gets into `values_out`
    /// (cleared first), each position the mirror's row of its id.
    ///
    /// Checks first that the envelope is a rows pull of this mirror's
    /// epoch from its version, with its `dim` and `max_rows`, and for
    /// these ids (count, hash, distinct ids, and as many held among them
    /// as the mirror holds); then decodes both frames; only then changes
    /// the mirror, identically to the holder (same additions, same
    /// eviction). On any error the mirror is unchanged (and `values_out`
    /// unspecified): the caller may keep it, though a requester that got
    /// a bad envelope usually drops it and announces none next time.
    pub fn apply(
        &mut self,
        ids: &[i64],
        envelope: &Envelope<'_>,
        uniques: &mut Uniques,
        values_out: &mut Vec<f32>,
    ) -> Result<RowsApplied, RowsError> {
        let (h, section) = rows_of(envelope, Kind::RowsPull)?;
        if h.epoch != self.epoch {
            return Err(RowsError::Epoch {
                have: self.epoch,
                got: h.epoch,
            });
        }
        if h.base_version != self.version {
            return Err(RowsError::Base {
                have: self.version,
                need: h.base_version,
            });
        }
        let dim = self.store.dim();
        if u64::from(section.dim) != dim as u64 {
            return Err(RowsError::Dim {
                have: dim,
                got: section.dim,
            });
        }
        if u64::from(section.max_rows) != self.store.max_rows() as u64 {
            return Err(RowsError::MaxRows {
                have: self.store.max_rows(),
                got: section.max_rows,
            });
        }
        let Uniques { ids: u, rows: s } = uniques;
        let unique = check_ids(&section, ids, u)?;
        partition(&self.store, &u.unique, s);
        let hits = s.held.len();
        if hits as u64 != u64::from(section.hits) {
            return Err(RowsError::Hits {
                have: hits,
                got: section.hits,
            });
        }
        let (Some(keyframes), Some(deltas)) = (envelope.frames().first(), envelope.frames().get(1))
        else {
            return Err(RowsError::Envelope(EnvelopeError::FrameCount {
                kind: h.kind,
                declared: h.frame_count,
                expected: 2,
            }));
        };
        // Envelope::parse checked the frames' counts against the section,
        // which agrees with these ids: the buffers are the frames' length
        // (decode_into checks it again).
        s.keys.resize(s.new.len() * dim, 0.0);
        keyframes.decode_into(&mut s.keys)?;
        s.deltas.resize(hits * dim, 0.0);
        deltas.decode_into(&mut s.deltas)?;
        add_passes(&envelope.frames()[2..], &mut s.deltas, &mut s.pass)?;
        let evicted = self.update(&u.unique, s);
        values_out.clear();
        values_out.reserve(ids.len() * dim);
        for &j in &u.index {
            values_out.extend_from_slice(self.store.row(s.slots[j as usize]));
        }
        Ok(RowsApplied {
            unique,
            hits,
            evicted,
        })
    }

    /// The one update both sides perform once the frames are decoded
    /// (`s.keys` the new rows, `s.deltas` the held rows' deltas): held
    /// rows `+= delta` (plain f32 additions, element by element), touched
    /// at the next version; eviction; new rows inserted. Fills `s.slots`
    /// (unique index → slot) and returns the rows evicted.
    fn update(&mut self, unique: &[i64], s: &mut RowScratch) -> usize {
        let clock = self.version + 1;
        let dim = self.store.dim();
        s.slots.clear();
        s.slots.resize(unique.len(), 0);
        for (&(j, slot), delta) in s.held.iter().zip(s.deltas.chunks_exact(dim)) {
            for (r, d) in self.store.row_mut(slot).iter_mut().zip(delta) {
                *r += *d;
            }
            self.store.touch(slot, clock);
            s.slots[j as usize] = slot;
        }
        let evicted = self
            .store
            .evict(clock, s.new.len(), unique.len(), &mut s.versions);
        for (&j, row) in s.new.iter().zip(s.keys.chunks_exact(dim)) {
            s.slots[j as usize] = self.store.insert(unique[j as usize], clock, row);
        }
        self.version = clock;
        evicted
    }
}

/// Splits the distinct ids into new ones (`s.new`) and held ones
/// (`s.held`, with their slots), both in first-appearance order.
fn partition(store: &RowStore, unique: &[i64], s: &mut RowScratch) {
    s.new.clear();
    s.held.clear();
    // At most u32::MAX distinct ids: the callers checked the positions.
    for (j, &id) in (0u32..).zip(unique) {
        match store.get(id) {
            Some(slot) => s.held.push((j, slot)),
            None => s.new.push(j),
        }
    }
}

/// Appends the keyframes frame (`s.keys`) and the deltas frame
/// (`s.deltas`), then decodes both in place, as the requester will.
fn encode_frames(
    keyframe_codec: &Codec,
    delta_codec: &Codec,
    entropy: EntropyStage,
    s: &mut RowScratch,
    out: &mut Vec<u8>,
) -> Result<(), RowsError> {
    let keyframes = out.len();
    let mut encoder = Encoder::new(*keyframe_codec, Feedback::Off);
    encoder.set_entropy_stage(entropy);
    encoder.encode(&s.keys, out)?;
    let deltas = out.len();
    let mut encoder = Encoder::new(*delta_codec, Feedback::Off);
    encoder.set_entropy_stage(entropy);
    encoder.encode(&s.deltas, out)?;
    decode_own(&out[keyframes..deltas], &mut s.keys)?;
    decode_own(&out[deltas..], &mut s.deltas)?;
    Ok(())
}

impl ContextMemory for RowMirror {
    fn memory_bytes(&self) -> usize {
        self.bytes()
    }
}
