//! The holder side of pulls: a [`PullSource`] per tensor, shared by all
//! workers, that encodes each new value's delta once and serves chains of
//! cached deltas or keyframes.

use std::collections::VecDeque;
use std::num::NonZeroU64;

use bytes::Bytes;
use thiserror::Error;
use tlc_codec::frame::{FIXED_HEADER_LEN, TRAILER_LEN};
use tlc_codec::{
    Codec, CodecId, DecodeError, EncodeError, Encoder, EntropyStage, Feedback, Limits,
};

use super::request::{KeyframeReason, PullCounters, PullServed, Reads, Requester, Served, Update};
use super::{add_delta, replica_hash, ReplicaState, DEFAULT_CACHE_LEN};
use crate::push::encode_stateless;
use crate::refine::{relative_to, sum_of_squares, Refinement};
use crate::table::ContextMemory;
use tlc_wire::envelope::{write_envelope, EnvelopeError, EnvelopeHeader, HEADER_LEN};

/// Largest relative distance `‖V − R‖₂ / ‖V‖₂` a replica may have from
/// the value it stands for once an update's passes are sent; beyond it the
/// source resets (a lossless keyframe). The backstop behind refinement:
/// without refinement, asynchronous training with several workers was
/// seen to let a 3LC replica drift past 15% and diverge; with it, this is
/// reached only when the pass budget is too small for how fast the model
/// moves.
pub const MAX_DRIFT: f64 = 0.10;

/// `‖value − replica‖₂ / ‖value‖₂`, 0 for a zero value equal to its replica.
pub fn drift(value: &[f32], replica: &[f32]) -> f64 {
    drift_against(value, replica, sum_of_squares(value.iter().copied()))
}

/// [`drift`] given `‖value‖₂²`.
fn drift_against(value: &[f32], replica: &[f32], value_squares: f64) -> f64 {
    relative_to(off_squares(value, replica), value_squares)
}

/// `‖value − replica‖₂²`.
fn off_squares(value: &[f32], replica: &[f32]) -> f64 {
    sum_of_squares(value.iter().zip(replica).map(|(v, r)| v - r))
}

/// Whether two tensors hold the same bits (so `-0.0` differs from `0.0`,
/// and a NaN from every other NaN payload).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Why [`PullSource::serve`] produced nothing; the caller passes the
/// value through uncompressed. The source itself stays consistent.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ServeError {
    /// The keyframe could not be written (a tensor too large for a frame).
    #[error("cannot write keyframe: {0}")]
    Keyframe(#[from] EncodeError),
    /// An envelope header built from the source's own state was refused:
    /// a bug, reported rather than sent.
    #[error("internal error writing an envelope: {0}")]
    Envelope(#[from] EnvelopeError),
}

/// The holder side of one tensor's pulls, shared by all workers.
#[derive(Debug)]
pub struct PullSource {
    epoch: NonZeroU64,
    /// `R`; meaningless while `version == 0`.
    replica: Vec<f32>,
    /// Version of `R`, from 1; 0 before the first value.
    version: u64,
    /// Hash of the last value seen.
    value_hash: u64,
    /// `deltas[i]` takes `R` from version `version - len + i` to the next.
    deltas: VecDeque<Bytes>,
    /// Updates whose deltas are kept; the cache holds this many times the
    /// refinement's pass budget, so a requester `cache_updates` updates
    /// behind still gets a chain.
    cache_updates: usize,
    /// Without feedback: the error of a lossy delta stays in `V - R`.
    encoder: Encoder,
    /// The lossy first keyframe whose decode `R` is: its codec and frame.
    /// Every new version (a reset, a delta) drops it.
    first_keyframe: Option<(CodecId, Bytes)>,
    /// `‖V − R₀‖₂²` of the largest update so far (kept where a peak-lag
    /// bound is set; see [`Refinement::peak_lag`]).
    peak_squares: f64,
    /// Set while `R` is being changed: if an update is cut short (a
    /// panic), the next call sees it and resets instead of serving a
    /// half-updated replica under an old version.
    updating: bool,
    counters: PullCounters,
    /// The scale (M) of the last delta frame, for the admin API.
    last_scale: Option<f32>,
}

impl PullSource {
    /// An empty source: the first value becomes version 1, sent as a
    /// keyframe. `epoch` must be unique to this source (see
    /// [`EpochGenerator`](super::EpochGenerator)); the deltas of
    /// `cache_updates` updates are kept for chains.
    pub fn new(epoch: NonZeroU64, cache_updates: usize) -> PullSource {
        PullSource {
            epoch,
            replica: Vec::new(),
            version: 0,
            value_hash: 0,
            deltas: VecDeque::with_capacity(cache_updates.min(DEFAULT_CACHE_LEN)),
            cache_updates,
            encoder: Encoder::new(Codec::None, Feedback::Off),
            first_keyframe: None,
            peak_squares: 0.0,
            updating: false,
            counters: PullCounters::default(),
            last_scale: None,
        }
    }

    /// Whether the deltas encoded from now on may carry the entropy stage.
    pub fn set_entropy_stage(&mut self, stage: EntropyStage) {
        self.encoder.set_entropy_stage(stage);
    }

    /// Brings the replica up to `value` (a new version if it changed) and
    /// appends to `out` the envelope that takes `requester` to it: an
    /// empty chain, a chain of cached deltas, or a keyframe.
    ///
    /// `codec` encodes the delta if there is a new version, with further
    /// passes (versions) while `refine` asks for them; both may change
    /// from call to call. A requester that reads exactly (see [`Reads`])
    /// gets a lossless delta instead where it needs one. On error `out`
    /// is as it was.
    pub fn serve(
        &mut self,
        value: &[f32],
        requester: impl Into<Requester>,
        codec: Codec,
        refine: Refinement,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<PullServed, ServeError> {
        let requester = requester.into();
        // Once per call: a read again is told by it, and an update keeps it.
        let hash = replica_hash(value);
        let exact = match requester.reads {
            Reads::Exact => true,
            Reads::SettleRereads => hash == self.value_hash && self.holds_current(requester.has),
            Reads::Replica | Reads::Settle => false,
        };
        if exact {
            return self.answer_exact(value, fallback_token, out);
        }
        let update = match requester.first_keyframe {
            Some(first) if self.version == 0 && requester.reads != Reads::Settle => {
                self.start_lossy(value, first, refine)
            }
            _ => None,
        }
        .unwrap_or_else(|| {
            if requester.reads == Reads::Settle {
                self.settle(value, hash)
            } else {
                self.update(value, hash, codec, refine)
            }
        });
        self.answer_counted(update, value, requester, fallback_token, out)
    }

    /// Appends `value` itself, losslessly, in a push envelope that no
    /// replica applies: the source and every replica stay as they are.
    fn answer_exact(
        &mut self,
        value: &[f32],
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<PullServed, ServeError> {
        let encoded = encode_stateless(value, Codec::None, EntropyStage::Off, fallback_token, out)?;
        Ok(self.counted(Update::Unchanged, Served::Exact, value, encoded.wire_bytes))
    }

    /// Whether a requester holding `has` holds this source's current
    /// version (and the source has one).
    fn holds_current(&self, has: Option<ReplicaState>) -> bool {
        has.is_some_and(|has| {
            self.version > 0 && has.epoch == self.epoch.get() && has.version == self.version
        })
    }

    /// Appends the answer to `requester` and counts it.
    fn answer_counted(
        &mut self,
        update: Update,
        value: &[f32],
        requester: Requester,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<PullServed, ServeError> {
        let start = out.len();
        let served = self
            .answer(requester, fallback_token, out)
            .inspect_err(|_| {
                out.truncate(start);
            })?;
        Ok(self.counted(update, served, value, out.len() - start))
    }

    /// What was served, counted: `wire_bytes` of envelope for `value`.
    fn counted(
        &mut self,
        update: Update,
        served: Served,
        value: &[f32],
        wire_bytes: usize,
    ) -> PullServed {
        let result = PullServed {
            update,
            served,
            state: ReplicaState {
                epoch: self.epoch.get(),
                version: self.version,
            },
            raw_bytes: std::mem::size_of_val(value),
            wire_bytes,
        };
        let c = &mut self.counters;
        match served {
            Served::UpToDate => c.up_to_date += 1,
            Served::Chain(_) => c.chains += 1,
            Served::Keyframe(_) => c.keyframes += 1,
            Served::Exact => c.settles += 1,
        }
        c.raw_bytes += result.raw_bytes as u64;
        c.wire_bytes += result.wire_bytes as u64;
        result
    }

    /// The first value held as `codec`'s decode (a new version, as a
    /// reset), if that decode is within `refine`'s target of it; `None`
    /// (nothing changed) if not, or if the codec refuses the value.
    fn start_lossy(&mut self, value: &[f32], codec: Codec, refine: Refinement) -> Option<Update> {
        let mut frame = Vec::new();
        Encoder::new(codec, Feedback::Off)
            .encode(value, &mut frame)
            .ok()?;
        let mut decoded = vec![0f32; value.len()];
        let limits = Limits {
            max_elements: value.len() as u64,
        };
        tlc_codec::decode(&frame, &limits, &mut decoded).ok()?;
        // NaN (a value with NaN in it) is not within anything.
        let off = drift(value, &decoded);
        if off.is_nan() || off > refine.target {
            return None;
        }
        self.reset(value, replica_hash(value));
        self.replica.copy_from_slice(&decoded);
        self.first_keyframe = Some((codec.id(), Bytes::from(frame)));
        self.counters.lossy_starts += 1;
        Some(Update::Reset)
    }

    /// Brings `R` toward `value`, whose [`replica_hash`] is `hash`: a new
    /// version of one or more lossy passes if it changed.
    fn update(&mut self, value: &[f32], hash: u64, codec: Codec, refine: Refinement) -> Update {
        if self.version == 0 || self.updating || value.len() != self.replica.len() {
            self.reset(value, hash);
            return Update::Reset;
        }
        if hash == self.value_hash {
            return Update::Unchanged;
        }
        self.value_hash = hash;
        let cache_len = self
            .cache_updates
            .saturating_mul(refine.max_passes.max(1) as usize);
        if refine.peak_lag.is_finite() {
            // The update's size, `‖V − R₀‖₂²`, for the peak bound.
            let update = off_squares(value, &self.replica);
            self.peak_squares = refine.next_peak(self.peak_squares, update);
        }
        let mut result = self.encode_delta(value, codec, cache_len, None);
        let mut passes = 1;
        // ‖V‖² once: every drift and a refinement's goal are against it.
        let value_squares = sum_of_squares(value.iter().copied());
        let mut off = off_squares(value, &self.replica);
        let goal = refine.pass_goal_within_peak(value_squares, self.peak_squares);
        while result.is_ok()
            && refine.another_pass_with_peak(passes, off, value_squares, self.peak_squares)
        {
            result = self.encode_delta(value, codec, cache_len, goal);
            if result.is_ok() {
                self.counters.refinements += 1;
            }
            passes += 1;
            off = off_squares(value, &self.replica);
        }
        let drifted = relative_to(off, value_squares);
        match result {
            Ok(()) if drifted > MAX_DRIFT => {
                // The lossy deltas no longer keep up with the value (fast,
                // asynchronous updates): what workers would train on is
                // too far from the model. Start again from V, losslessly.
                self.counters.drift_resets += 1;
                self.reset(value, hash);
                Update::Reset
            }
            Ok(()) => Update::Delta,
            Err(_) => {
                // NaN or infinity in V - R, say: send V losslessly instead,
                // and count it.
                self.counters.encode_failures += 1;
                self.reset(value, hash);
                Update::Reset
            }
        }
    }

    /// Makes `R` equal to `value` bit for bit: nothing if it is, else a
    /// lossless delta `V - R` as a new version, or a reset where `R + (V -
    /// R)` does not give `V` back in f32 (rare: far apart exponents).
    /// `hash` is `value`'s [`replica_hash`].
    fn settle(&mut self, value: &[f32], hash: u64) -> Update {
        if self.version == 0 || self.updating || value.len() != self.replica.len() {
            self.reset(value, hash);
            return Update::Reset;
        }
        self.value_hash = hash;
        if same_bits(&self.replica, value) {
            return Update::Unchanged;
        }
        self.counters.settles += 1;
        // One more frame than the cache holds now, so that no requester
        // loses the chain it is on.
        let cache_len = (self.deltas.len() + 1).max(self.cache_updates);
        match self.encode_delta(value, Codec::None, cache_len, None) {
            Ok(()) if same_bits(&self.replica, value) => Update::Delta,
            _ => {
                self.reset(value, hash);
                Update::Reset
            }
        }
    }

    /// `R = V` exactly, a new version, no deltas to reach it: everyone
    /// gets a keyframe.
    fn reset(&mut self, value: &[f32], hash: u64) {
        self.first_keyframe = None;
        self.replica.clear();
        self.replica.extend_from_slice(value);
        self.value_hash = hash;
        self.version += 1;
        self.deltas.clear();
        self.updating = false;
        self.counters.resets += 1;
    }

    /// Encodes `D = V - R` once, adds the decoded delta to `R` and caches
    /// the frame, keeping at most `cache_len` frames. A refinement may pass
    /// the squared drift it may leave (see [`Encoder::encode_pass`]). On
    /// error nothing has changed.
    fn encode_delta(
        &mut self,
        value: &[f32],
        codec: Codec,
        cache_len: usize,
        goal: Option<f64>,
    ) -> Result<(), DeltaError> {
        let mut delta: Vec<f32> = value
            .iter()
            .zip(&self.replica)
            .map(|(v, r)| v - r)
            .collect();
        self.encoder.set_codec(codec);
        let mut frame = Vec::new();
        let header = self.encoder.encode_pass(&delta, goal, &mut frame)?;
        self.last_scale = crate::push::scale_of(&header.params);
        // Decode our own frame exactly as a requester will, into the
        // same buffer.
        let limits = Limits {
            max_elements: delta.len() as u64,
        };
        tlc_codec::decode(&frame, &limits, &mut delta)?;
        self.updating = true;
        self.first_keyframe = None;
        add_delta(&mut self.replica, &delta);
        self.version += 1;
        self.updating = false;
        if cache_len > 0 {
            while self.deltas.len() >= cache_len {
                self.deltas.pop_front();
            }
            self.deltas.push_back(Bytes::from(frame));
        }
        self.counters.deltas += 1;
        Ok(())
    }

    fn answer(
        &mut self,
        requester: Requester,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<Served, ServeError> {
        let epoch = self.epoch.get();
        let version = self.version;
        let reason = match requester.has {
            None => KeyframeReason::NoReplica,
            Some(r) if r.epoch != epoch => KeyframeReason::OtherEpoch,
            Some(r) if r.version > version => KeyframeReason::Ahead,
            Some(r) if r.version == version => {
                let header = EnvelopeHeader::chain(fallback_token, epoch, version, version)?;
                write_envelope(&header, &[] as &[Bytes], out)?;
                return Ok(Served::UpToDate);
            }
            Some(r) => {
                let behind = version - r.version;
                match usize::try_from(behind) {
                    Ok(k) if r.version >= 1 && k <= self.deltas.len() => {
                        let keyframe_len = self.keyframe_len();
                        let deltas = self.deltas.make_contiguous();
                        let frames = &deltas[deltas.len() - k..];
                        let chain_len: usize = frames.iter().map(Bytes::len).sum();
                        if chain_len >= keyframe_len - HEADER_LEN {
                            KeyframeReason::ChainLarger
                        } else {
                            let header =
                                EnvelopeHeader::chain(fallback_token, epoch, r.version, version)?;
                            write_envelope(&header, frames, out)?;
                            return Ok(Served::Chain(header.frame_count));
                        }
                    }
                    _ => KeyframeReason::NotCached,
                }
            }
        };
        self.write_keyframe(requester, fallback_token, out)?;
        Ok(Served::Keyframe(reason))
    }

    fn write_keyframe(
        &self,
        requester: Requester,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        EnvelopeHeader::keyframe(fallback_token, self.epoch.get(), self.version).write(out);
        // The lossy first keyframe, to a requester that reads its codec.
        if let Some((codec, frame)) = &self.first_keyframe {
            if requester.first_keyframe.map(|c| c.id()) == Some(*codec) {
                out.extend_from_slice(frame);
                return Ok(());
            }
        }
        // `none` is lossless and stateless: a fresh encoder costs nothing.
        Encoder::new(Codec::None, Feedback::Off).encode(&self.replica, out)?;
        Ok(())
    }

    /// Bytes of a keyframe envelope of the current replica.
    fn keyframe_len(&self) -> usize {
        HEADER_LEN + FIXED_HEADER_LEN + 4 * self.replica.len() + TRAILER_LEN
    }

    /// The current replica state, or `None` before the first value.
    pub fn state(&self) -> Option<ReplicaState> {
        (self.version > 0).then_some(ReplicaState {
            epoch: self.epoch.get(),
            version: self.version,
        })
    }

    /// `R`, as every up-to-date requester has it.
    pub fn replica(&self) -> &[f32] {
        &self.replica
    }

    /// The [`replica_hash`] of what a requester holds after being served
    /// `served` for `value`: `value` itself after an exact answer, else
    /// the replica.
    pub fn restored_hash(&self, served: Served, value: &[f32]) -> u64 {
        match served {
            Served::Exact => replica_hash(value),
            Served::UpToDate | Served::Chain(_) | Served::Keyframe(_) => self.replica_hash(),
        }
    }

    /// [`replica_hash`] of `R`.
    pub fn replica_hash(&self) -> u64 {
        replica_hash(&self.replica)
    }

    /// This source's epoch.
    pub fn epoch(&self) -> NonZeroU64 {
        self.epoch
    }

    /// Number of deltas cached (how far behind a chain can reach).
    pub fn cached(&self) -> usize {
        self.deltas.len()
    }

    /// Running totals.
    pub fn counters(&self) -> PullCounters {
        self.counters
    }

    /// The codec the last delta was encoded with.
    pub fn codec(&self) -> Codec {
        *self.encoder.codec()
    }

    /// The scale (M) of the last delta, if its codec has one.
    pub fn last_scale(&self) -> Option<f32> {
        self.last_scale
    }
}

/// Why a delta could not be made; the source then resets.
#[derive(Debug, Error)]
enum DeltaError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl ContextMemory for PullSource {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<PullSource>()
            + self.replica.capacity() * 4
            + self.deltas.iter().map(Bytes::len).sum::<usize>()
            + self.first_keyframe.as_ref().map_or(0, |(_, f)| f.len())
    }
}
