//! Pull contexts: model values, held by a parameter task and asked for by
//! every worker.
//!
//! The holder-side sidecar keeps one [`PullSource`] per tensor, shared by
//! all workers: a replica `R` (what every worker sidecar has rebuilt), its
//! version, and the last few encoded deltas. When the value `V` asked for
//! changes, it encodes `V - R` once, adds the decoded delta to `R` and
//! caches the frame: every worker at the previous version gets the same
//! bytes (shared pull compression). What a lossy codec did not send stays
//! in `V - R` and goes out with the next version: that is 3LC's error
//! accumulation for model values, so the encoder has no feedback buffer.
//!
//! The requester-side sidecar keeps a [`Replica`] per (holder, tensor) in a
//! [`ReplicaStore`], applies what the holder sends, and hands the replica to
//! TensorFlow. Both sides build `R` with the same decode and the same f32
//! additions in the same order, so the replicas are bit-identical; an
//! `(epoch, version)` pair names one replica value.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use thiserror::Error;
use tlc_codec::frame::{FIXED_HEADER_LEN, TRAILER_LEN};
use tlc_codec::{Codec, DecodeError, EncodeError, Encoder, Feedback, Limits, Params};
use xxhash_rust::xxh3::Xxh3Default;

use super::envelope::{write_envelope, Envelope, EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN};
use super::refine::{relative_l2, Refinement};
use super::table::{lock, ContextMemory, ContextTable, TableLimits};

/// How many updates' deltas a [`PullSource`] keeps by default (each
/// update is one delta, or several with refinement).
pub const DEFAULT_CACHE_LEN: usize = 8;

/// Names one replica value: a holder's epoch and a version in it.
/// Version 0 is never used (it would mean "no replica").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplicaState {
    /// The epoch of the [`PullSource`] that made the version.
    pub epoch: u64,
    /// The version, from 1.
    pub version: u64,
}

/// 64-bit xxh3 of the values' little-endian bytes: equal hashes on both
/// sides mean (with overwhelming probability) bit-identical replicas.
pub fn replica_hash(values: &[f32]) -> u64 {
    let mut hasher = Xxh3Default::new();
    // Through a stack buffer: no unsafe casts, no allocation, same bytes
    // on every platform.
    let mut buf = [0u8; 4096];
    for chunk in values.chunks(buf.len() / 4) {
        for (dst, v) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        hasher.update(&buf[..chunk.len() * 4]);
    }
    hasher.digest()
}

/// `replica += delta`, the one addition both sides perform. Plain f32
/// adds, element by element (Rust never fuses or reorders them), so the
/// holder and every requester get the same bits.
fn add_delta(replica: &mut [f32], delta: &[f32]) {
    for (r, d) in replica.iter_mut().zip(delta) {
        *r += *d;
    }
}

/// Hands out epochs that are distinct for the life of the process and,
/// through the random start, from those of earlier processes.
///
/// Every [`PullSource`] needs its own: a source evicted and made again
/// starts over at version 1, and a worker still holding "version 1" of the
/// old one must not be told it is up to date.
#[derive(Debug)]
pub struct EpochGenerator {
    next: AtomicU64,
}

impl EpochGenerator {
    /// Starts at `seed` (give it [`random_seed`] in the daemon, a constant
    /// in tests).
    pub fn new(seed: u64) -> EpochGenerator {
        EpochGenerator {
            next: AtomicU64::new(seed),
        }
    }

    /// The next epoch (never 0).
    pub fn next(&self) -> NonZeroU64 {
        loop {
            let epoch = self.next.fetch_add(1, Ordering::Relaxed);
            if let Some(epoch) = NonZeroU64::new(epoch) {
                return epoch;
            }
        }
    }
}

/// A random 64-bit seed for an [`EpochGenerator`], from the standard
/// library's randomly keyed hasher (no extra dependency) and the clock.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    std::time::SystemTime::now().hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    hasher.finish()
}

/// Why a keyframe was sent rather than deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyframeReason {
    /// The requester has no replica.
    NoReplica,
    /// The requester's replica is from another epoch (a restart, or an
    /// evicted and remade source).
    OtherEpoch,
    /// The requester is further behind than the cache reaches.
    NotCached,
    /// The requester claims a version this source has not made yet.
    Ahead,
    /// The chain would be at least as large as the keyframe.
    ChainLarger,
}

/// The kind of answer [`PullSource::serve`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The requester is at the current version: an empty chain.
    UpToDate,
    /// A chain of this many cached deltas.
    Chain(u32),
    /// The replica itself.
    Keyframe(KeyframeReason),
}

/// How the last value changed the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// The value was the last one: nothing changed.
    Unchanged,
    /// A new version from one encoded delta.
    Delta,
    /// A new version with `R = V` and an empty cache: the first value, a
    /// change of length, or a delta the codec could not encode.
    Reset,
}

/// What one [`PullSource::serve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullServed {
    /// How the value changed the source.
    pub update: Update,
    /// What was sent.
    pub served: Served,
    /// The requester's replica state once it has applied the envelope.
    pub state: ReplicaState,
    /// Size of the value as f32, in bytes.
    pub raw_bytes: usize,
    /// Size of the envelope appended, in bytes.
    pub wire_bytes: usize,
}

/// Running totals of one pull source, for metrics and the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PullCounters {
    /// Deltas encoded (one per new version that was not a reset).
    pub deltas: u64,
    /// Of those, refinements: further passes over what an update's first
    /// delta left (see [`super::refine`]).
    pub refinements: u64,
    /// Resets (first value, length change, encode failure).
    pub resets: u64,
    /// Deltas the codec refused (counted in `resets` too).
    pub encode_failures: u64,
    /// Resets because the replica had drifted more than [`MAX_DRIFT`]
    /// from the value (counted in `resets` too).
    pub drift_resets: u64,
    /// Answers: empty chains.
    pub up_to_date: u64,
    /// Answers: non-empty chains.
    pub chains: u64,
    /// Answers: keyframes.
    pub keyframes: u64,
    /// Bytes the values would have cost as f32.
    pub raw_bytes: u64,
    /// Bytes of envelopes sent.
    pub wire_bytes: u64,
}

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
    relative_l2(value.iter().zip(replica).map(|(v, r)| v - r), value)
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
    /// [`EpochGenerator`]); the deltas of `cache_updates` updates are kept
    /// for chains.
    pub fn new(epoch: NonZeroU64, cache_updates: usize) -> PullSource {
        PullSource {
            epoch,
            replica: Vec::new(),
            version: 0,
            value_hash: 0,
            deltas: VecDeque::with_capacity(cache_updates.min(DEFAULT_CACHE_LEN)),
            cache_updates,
            encoder: Encoder::new(Codec::None, Feedback::Off),
            updating: false,
            counters: PullCounters::default(),
            last_scale: None,
        }
    }

    /// Brings the replica up to `value` (a new version if it changed) and
    /// appends to `out` the envelope that takes `requester` to it: an
    /// empty chain, a chain of cached deltas, or a keyframe.
    ///
    /// `codec` encodes the delta if there is a new version, with further
    /// passes (versions) while `refine` asks for them; both may change
    /// from call to call. On error `out` is as it was.
    pub fn serve(
        &mut self,
        value: &[f32],
        requester: Option<ReplicaState>,
        codec: Codec,
        refine: Refinement,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<PullServed, ServeError> {
        let update = self.update(value, codec, refine);
        let start = out.len();
        let served = self
            .answer(requester, fallback_token, out)
            .inspect_err(|_| {
                out.truncate(start);
            })?;
        let result = PullServed {
            update,
            served,
            state: ReplicaState {
                epoch: self.epoch.get(),
                version: self.version,
            },
            raw_bytes: std::mem::size_of_val(value),
            wire_bytes: out.len() - start,
        };
        let c = &mut self.counters;
        match served {
            Served::UpToDate => c.up_to_date += 1,
            Served::Chain(_) => c.chains += 1,
            Served::Keyframe(_) => c.keyframes += 1,
        }
        c.raw_bytes += result.raw_bytes as u64;
        c.wire_bytes += result.wire_bytes as u64;
        Ok(result)
    }

    fn update(&mut self, value: &[f32], codec: Codec, refine: Refinement) -> Update {
        let hash = replica_hash(value);
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
        let mut result = self.encode_delta(value, codec, cache_len);
        let mut passes = 1;
        let mut drifted = drift(value, &self.replica);
        while result.is_ok() && refine.another_pass(passes, drifted) {
            result = self.encode_delta(value, codec, cache_len);
            if result.is_ok() {
                self.counters.refinements += 1;
            }
            passes += 1;
            drifted = drift(value, &self.replica);
        }
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

    /// `R = V` exactly, a new version, no deltas to reach it: everyone
    /// gets a keyframe.
    fn reset(&mut self, value: &[f32], hash: u64) {
        self.replica.clear();
        self.replica.extend_from_slice(value);
        self.value_hash = hash;
        self.version += 1;
        self.deltas.clear();
        self.updating = false;
        self.counters.resets += 1;
    }

    /// Encodes `D = V - R` once, adds the decoded delta to `R` and caches
    /// the frame, keeping at most `cache_len` frames. On error nothing has
    /// changed.
    fn encode_delta(
        &mut self,
        value: &[f32],
        codec: Codec,
        cache_len: usize,
    ) -> Result<(), DeltaError> {
        let mut delta: Vec<f32> = value
            .iter()
            .zip(&self.replica)
            .map(|(v, r)| v - r)
            .collect();
        self.encoder.set_codec(codec);
        let mut frame = Vec::new();
        let header = self.encoder.encode(&delta, &mut frame)?;
        self.last_scale = super::push::scale_of(&header.params);
        // Decode our own frame exactly as a requester will, into the
        // same buffer.
        let limits = Limits {
            max_elements: delta.len() as u64,
        };
        tlc_codec::decode(&frame, &limits, &mut delta)?;
        self.updating = true;
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
        requester: Option<ReplicaState>,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<Served, ServeError> {
        let epoch = self.epoch.get();
        let version = self.version;
        let reason = match requester {
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
        self.write_keyframe(fallback_token, out)?;
        Ok(Served::Keyframe(reason))
    }

    fn write_keyframe(&self, fallback_token: u64, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        EnvelopeHeader::keyframe(fallback_token, self.epoch.get(), self.version).write(out);
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
    }
}

/// Which replica a requester-side sidecar keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaKey {
    /// The holder's identity, e.g. its task `/job:ps/replica:0/task:0`.
    pub holder: String,
    /// The task the replica is for: one sidecar may carry several tasks'
    /// calls (TF2's coordinator routes them all), and each task's replica
    /// moves at its own pace.
    pub requester: String,
    /// The node name part of the rendezvous tensor name.
    pub tensor: String,
}

/// Which pull source a holder-side sidecar keeps: one per holding task and
/// tensor, shared by every requester.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceKey {
    /// The task holding the tensor.
    pub holder: String,
    /// The node name part of the rendezvous tensor name.
    pub tensor: String,
}

/// Why an envelope could not be applied to a replica. The variants say
/// whether the replica survived: all but [`ApplyError::Dropped`] leave it
/// as it was.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ApplyError {
    /// The envelope is malformed (checked before anything changes).
    #[error("bad pull envelope: {0}")]
    Envelope(#[from] EnvelopeError),
    /// A well-formed push envelope where a pull answer was expected.
    #[error("expected a pull envelope, got a push")]
    NotAPull,
    /// A chain for a replica this side does not have.
    #[error("chain from {need:?} but no replica here")]
    NoReplica {
        /// The state the chain starts from.
        need: ReplicaState,
    },
    /// A chain that starts from another state than this replica's.
    #[error("chain from {need:?} but the replica is at {have:?}")]
    Base {
        /// The replica's state.
        have: ReplicaState,
        /// The state the chain starts from.
        need: ReplicaState,
    },
    /// A chain whose frames have another length than the replica.
    #[error("chain frames hold {frames} values, the replica {replica}")]
    Length {
        /// Values in the replica.
        replica: usize,
        /// Values per frame.
        frames: u64,
    },
    /// A frame's payload did not decode before anything was changed.
    #[error("frame {index} does not decode (replica unchanged): {source}")]
    Decode {
        /// Position of the frame.
        index: u32,
        /// What was wrong.
        source: DecodeError,
    },
    /// A frame of a chain did not decode after earlier frames were
    /// applied: the replica is dropped, and the next request asks for a
    /// keyframe.
    #[error("frame {index} of the chain does not decode, replica dropped: {source}")]
    Dropped {
        /// Position of the frame.
        index: u32,
        /// What was wrong.
        source: DecodeError,
    },
}

/// Running totals of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaCounters {
    /// Keyframes applied.
    pub keyframes: u64,
    /// Non-empty chains applied.
    pub chains: u64,
    /// Empty chains (already up to date).
    pub up_to_date: u64,
    /// Deltas applied.
    pub deltas: u64,
    /// Envelopes refused.
    pub errors: u64,
    /// Bytes of the values handed to TensorFlow, as f32.
    pub raw_bytes: u64,
    /// Bytes of the envelopes applied.
    pub wire_bytes: u64,
}

/// The requester side of one tensor's pulls: the replica and its state.
#[derive(Debug, Clone, Default)]
pub struct Replica {
    state: Option<ReplicaState>,
    values: Vec<f32>,
    counters: ReplicaCounters,
    /// Codec and parameters of the last frame applied, for the admin API.
    last_params: Option<Params>,
}

impl Replica {
    /// No replica yet: the first request asks for a keyframe.
    pub fn new() -> Replica {
        Replica::default()
    }

    /// The state to put in the request, or `None` to ask for a keyframe.
    pub fn state(&self) -> Option<ReplicaState> {
        self.state
    }

    /// The replica, if there is one.
    pub fn values(&self) -> Option<&[f32]> {
        self.state.map(|_| self.values.as_slice())
    }

    /// [`replica_hash`] of the replica, if there is one.
    pub fn replica_hash(&self) -> Option<u64> {
        self.values().map(replica_hash)
    }

    /// Running totals.
    pub fn counters(&self) -> ReplicaCounters {
        self.counters
    }

    /// Codec and parameters of the last frame applied.
    pub fn last_params(&self) -> Option<Params> {
        self.last_params
    }

    /// Forgets the replica (keeps the counters).
    pub fn invalidate(&mut self) {
        self.state = None;
        self.values = Vec::new();
    }

    /// Applies a pull envelope from the holder and returns the replica to
    /// hand to TensorFlow.
    ///
    /// A keyframe replaces the replica. A chain applies only to a replica at
    /// exactly its `(epoch, base_version)`, frame by frame (`R += decoded`).
    /// Everything that can be checked before changing the replica is; if a
    /// frame still fails midway through a chain, the replica is dropped
    /// ([`ApplyError::Dropped`]), never left half-applied.
    pub fn apply(&mut self, envelope: &[u8], limits: &Limits) -> Result<&[f32], ApplyError> {
        match self.try_apply(envelope, limits) {
            Ok(()) => {
                self.counters.raw_bytes += 4 * self.values.len() as u64;
                self.counters.wire_bytes += envelope.len() as u64;
                Ok(&self.values)
            }
            Err(err) => {
                self.counters.errors += 1;
                if matches!(err, ApplyError::Dropped { .. }) {
                    self.invalidate();
                }
                Err(err)
            }
        }
    }

    fn try_apply(&mut self, envelope: &[u8], limits: &Limits) -> Result<(), ApplyError> {
        let parsed = Envelope::parse(envelope, limits)?;
        let h = parsed.header;
        let target = ReplicaState {
            epoch: h.epoch,
            version: h.target_version,
        };
        match h.kind {
            Kind::Push => Err(ApplyError::NotAPull),
            Kind::Keyframe => {
                let mut values = Vec::new();
                for (index, frame) in (0u32..).zip(parsed.frames()) {
                    // Bounded by limits.max_elements in Frame::parse.
                    let n =
                        usize::try_from(frame.header.elements).map_err(|_| ApplyError::Decode {
                            index,
                            source: DecodeError::TooManyElements {
                                elements: frame.header.elements,
                                limit: limits.max_elements,
                            },
                        })?;
                    values.resize(n, 0.0);
                    frame
                        .decode_into(&mut values)
                        .map_err(|source| ApplyError::Decode { index, source })?;
                    self.last_params = Some(frame.header.params);
                }
                self.values = values;
                self.state = Some(target);
                self.counters.keyframes += 1;
                Ok(())
            }
            Kind::Chain => {
                let need = ReplicaState {
                    epoch: h.epoch,
                    version: h.base_version,
                };
                match self.state {
                    None => return Err(ApplyError::NoReplica { need }),
                    Some(have) if have != need => return Err(ApplyError::Base { have, need }),
                    Some(_) => {}
                }
                if parsed.frames().is_empty() {
                    self.counters.up_to_date += 1;
                    return Ok(());
                }
                // Envelope::parse checked all frames have this length.
                if parsed.elements() != self.values.len() as u64 {
                    return Err(ApplyError::Length {
                        replica: self.values.len(),
                        frames: parsed.elements(),
                    });
                }
                let mut delta = vec![0.0f32; self.values.len()];
                for (index, frame) in (0u32..).zip(parsed.frames()) {
                    if let Err(source) = frame.decode_into(&mut delta) {
                        return Err(if index == 0 {
                            ApplyError::Decode { index, source }
                        } else {
                            ApplyError::Dropped { index, source }
                        });
                    }
                    add_delta(&mut self.values, &delta);
                    self.counters.deltas += 1;
                    self.last_params = Some(frame.header.params);
                }
                self.state = Some(target);
                self.counters.chains += 1;
                Ok(())
            }
        }
    }
}

impl ContextMemory for Replica {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Replica>() + self.values.capacity() * 4
    }
}

/// The requester side's replicas, by (holder, tensor), bounded like any
/// [`ContextTable`].
pub struct ReplicaStore {
    table: ContextTable<ReplicaKey, Replica>,
}

impl ReplicaStore {
    /// An empty store.
    pub fn new(limits: TableLimits) -> ReplicaStore {
        ReplicaStore {
            table: ContextTable::new(limits),
        }
    }

    /// The state to put in a request for `key`, or `None` to ask for a
    /// keyframe.
    pub fn state(&self, key: &ReplicaKey, now: Instant) -> Option<ReplicaState> {
        self.table.get(key, now).and_then(|r| lock(&r).state())
    }

    /// Applies an envelope to `key`'s replica (made empty if there is none)
    /// and passes the resulting values to `take` while the replica is
    /// locked, typically to copy them into the response for TensorFlow.
    pub fn apply<T>(
        &self,
        key: &ReplicaKey,
        envelope: &[u8],
        limits: &Limits,
        now: Instant,
        take: impl FnOnce(&[f32]) -> T,
    ) -> Result<T, ApplyError> {
        let replica = self.table.get_or_insert_with(key, now, Replica::new);
        let mut replica = lock(&replica);
        replica.apply(envelope, limits).map(take)
    }

    /// [`replica_hash`] of `key`'s replica, if there is one.
    pub fn replica_hash(&self, key: &ReplicaKey, now: Instant) -> Option<u64> {
        self.table
            .get(key, now)
            .and_then(|r| lock(&r).replica_hash())
    }

    /// The table, for eviction, stats and listings.
    pub fn table(&self) -> &ContextTable<ReplicaKey, Replica> {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tlc_codec::Sparsity;

    fn three_lc() -> Codec {
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        }
    }

    fn epoch(e: u64) -> NonZeroU64 {
        NonZeroU64::new(e).unwrap()
    }

    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 - n as f32 / 2.0) * scale)
            .collect()
    }

    /// One serve + apply; asserts the two replicas agree.
    fn pull(source: &mut PullSource, replica: &mut Replica, value: &[f32]) -> PullServed {
        let mut wire = Vec::new();
        let served = source
            .serve(
                value,
                replica.state(),
                three_lc(),
                Refinement::OFF,
                0,
                &mut wire,
            )
            .unwrap();
        assert_eq!(served.wire_bytes, wire.len());
        replica.apply(&wire, &Limits::default()).unwrap();
        assert_eq!(replica.state(), Some(served.state));
        assert_eq!(replica.replica_hash(), Some(source.replica_hash()));
        served
    }

    #[test]
    fn hash_is_xxh3_of_the_little_endian_bytes() {
        let values = ramp(3000, 0.1);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(replica_hash(&values), xxhash_rust::xxh3::xxh3_64(&bytes));
        assert_eq!(replica_hash(&[]), xxhash_rust::xxh3::xxh3_64(&[]));
    }

    #[test]
    fn first_value_is_an_exact_keyframe() {
        let mut source = PullSource::new(epoch(5), DEFAULT_CACHE_LEN);
        assert_eq!(source.state(), None);
        let mut replica = Replica::new();
        let v = ramp(100, 0.01);
        let served = pull(&mut source, &mut replica, &v);
        assert_eq!(served.update, Update::Reset);
        assert_eq!(served.served, Served::Keyframe(KeyframeReason::NoReplica));
        assert_eq!(
            served.state,
            ReplicaState {
                epoch: 5,
                version: 1
            }
        );
        assert_eq!(source.replica(), v.as_slice());
        assert_eq!(replica.values(), Some(v.as_slice()));
        // Same value again: up to date, nothing encoded.
        let served = pull(&mut source, &mut replica, &v);
        assert_eq!(
            (served.update, served.served),
            (Update::Unchanged, Served::UpToDate)
        );
        assert_eq!(served.wire_bytes, HEADER_LEN);
    }

    #[test]
    fn a_replica_that_drifts_too_far_is_reset_losslessly() {
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        let v1 = vec![1.0f32; 1000];
        pull(&mut source, &mut replica, &v1);
        // A small step: the delta keeps the replica close.
        let v2: Vec<f32> = v1
            .iter()
            .enumerate()
            .map(|(i, v)| v + 1e-3 * ((i % 7) as f32 - 3.0))
            .collect();
        assert_eq!(pull(&mut source, &mut replica, &v2).update, Update::Delta);
        assert!(drift(&v2, source.replica()) <= MAX_DRIFT);
        // A jump no ternary delta can follow: reset, and the requester
        // gets the value exactly.
        let v3: Vec<f32> = v2
            .iter()
            .enumerate()
            .map(|(i, v)| v + 0.5 * ((i * 37 % 11) as f32 / 5.0 - 1.0))
            .collect();
        let served = pull(&mut source, &mut replica, &v3);
        assert_eq!(served.update, Update::Reset);
        assert_eq!(source.counters().drift_resets, 1);
        assert_eq!(replica.values(), Some(v3.as_slice()));
        assert_eq!(drift(&v3, &v3), 0.0);
        assert_eq!(drift(&[0.0], &[1.0]), f64::INFINITY);
    }

    #[test]
    fn deltas_are_shared_chained_and_bounded() {
        let mut source = PullSource::new(epoch(5), 3);
        let (mut a, mut b) = (Replica::new(), Replica::new());
        let mut v = ramp(200, 0.01);
        pull(&mut source, &mut a, &v);
        pull(&mut source, &mut b, &v);
        for step in 1..=3 {
            v.iter_mut().for_each(|x| *x += 0.001);
            let sa = pull(&mut source, &mut a, &v);
            assert_eq!((sa.update, sa.served), (Update::Delta, Served::Chain(1)));
            if step == 1 {
                let sb = pull(&mut source, &mut b, &v);
                assert_eq!(
                    (sb.update, sb.served),
                    (Update::Unchanged, Served::Chain(1))
                );
            }
        }
        // b skipped a version: a chain of 2.
        assert_eq!(pull(&mut source, &mut b, &v).served, Served::Chain(2));
        assert_eq!(source.counters().deltas, 3);
        // Four more versions for a; b is now 4 behind a cache of 3.
        for _ in 0..4 {
            v.iter_mut().for_each(|x| *x -= 0.0007);
            pull(&mut source, &mut a, &v);
        }
        assert_eq!(source.cached(), 3);
        let sb = pull(&mut source, &mut b, &v);
        assert_eq!(sb.served, Served::Keyframe(KeyframeReason::NotCached));
    }

    #[test]
    fn keyframes_for_strangers_and_the_future() {
        let mut source = PullSource::new(epoch(5), 8);
        let v = ramp(50, 1.0);
        let mut out = Vec::new();
        source
            .serve(&v, None, three_lc(), Refinement::OFF, 0, &mut out)
            .unwrap();
        let cases = [
            (
                ReplicaState {
                    epoch: 4,
                    version: 1,
                },
                KeyframeReason::OtherEpoch,
            ),
            (
                ReplicaState {
                    epoch: 5,
                    version: 2,
                },
                KeyframeReason::Ahead,
            ),
            (
                ReplicaState {
                    epoch: 5,
                    version: 0,
                },
                KeyframeReason::NotCached,
            ),
        ];
        for (state, reason) in cases {
            let served = source
                .serve(&v, Some(state), three_lc(), Refinement::OFF, 0, &mut out)
                .unwrap();
            assert_eq!(served.served, Served::Keyframe(reason));
        }
    }

    #[test]
    fn long_chains_give_way_to_keyframes() {
        // With the lossless codec every delta is as large as a keyframe.
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        let mut v = ramp(10, 1.0);
        pull(&mut source, &mut replica, &v);
        let old = replica.state();
        for _ in 0..2 {
            v[0] += 1.0;
            source
                .serve(&v, None, Codec::None, Refinement::OFF, 0, &mut Vec::new())
                .unwrap();
        }
        let served = source
            .serve(&v, old, Codec::None, Refinement::OFF, 0, &mut Vec::new())
            .unwrap();
        assert_eq!(served.served, Served::Keyframe(KeyframeReason::ChainLarger));
    }

    #[test]
    fn a_shape_change_resets() {
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        pull(&mut source, &mut replica, &ramp(10, 1.0));
        let served = pull(&mut source, &mut replica, &ramp(12, 1.0));
        assert_eq!(served.update, Update::Reset);
        assert_eq!(served.served, Served::Keyframe(KeyframeReason::NotCached));
        assert_eq!(served.state.version, 2);
        assert_eq!(replica.values().map(<[f32]>::len), Some(12));
    }

    #[test]
    fn non_finite_values_reset_losslessly() {
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        let mut v = ramp(10, 1.0);
        pull(&mut source, &mut replica, &v);
        v[3] = f32::NAN;
        let served = pull(&mut source, &mut replica, &v);
        assert_eq!(served.update, Update::Reset);
        assert_eq!(source.counters().encode_failures, 1);
        assert!(replica.values().unwrap()[3].is_nan());
        v[3] = 1.0;
        // V - R is NaN at 3 again: another lossless reset, not a crash.
        assert_eq!(pull(&mut source, &mut replica, &v).update, Update::Reset);
        assert_eq!(replica.values(), Some(v.as_slice()));
    }

    #[test]
    fn chains_apply_only_at_their_base() {
        let mut source = PullSource::new(epoch(5), 8);
        let (mut a, mut b) = (Replica::new(), Replica::new());
        let mut v = ramp(30, 0.1);
        pull(&mut source, &mut a, &v);
        v[1] += 0.5;
        let mut chain = Vec::new();
        source
            .serve(&v, a.state(), three_lc(), Refinement::OFF, 0, &mut chain)
            .unwrap();
        let limits = Limits::default();
        // b has no replica.
        assert_eq!(
            b.apply(&chain, &limits).unwrap_err(),
            ApplyError::NoReplica {
                need: ReplicaState {
                    epoch: 5,
                    version: 1
                }
            }
        );
        // b at another version: refused, unchanged.
        let mut other = PullSource::new(epoch(6), 8);
        pull(&mut other, &mut b, &v);
        let before = b.replica_hash();
        assert!(matches!(
            b.apply(&chain, &limits),
            Err(ApplyError::Base { .. })
        ));
        assert_eq!(b.replica_hash(), before);
        // A push is not a pull answer.
        let mut push = Vec::new();
        crate::context::push::PushContext::new(three_lc(), Feedback::On)
            .encode(&v, three_lc(), Refinement::OFF, 0, &mut push)
            .unwrap();
        assert_eq!(a.apply(&push, &limits).unwrap_err(), ApplyError::NotAPull);
        // a applies it twice? The second time its version moved on.
        a.apply(&chain, &limits).unwrap();
        assert!(matches!(
            a.apply(&chain, &limits),
            Err(ApplyError::Base { .. })
        ));
        assert_eq!(a.replica_hash(), Some(source.replica_hash()));
        assert_eq!(a.counters().errors, 2);
    }

    /// Builds a chain of three deltas from version 1 and returns
    /// (replica at 1, the chain's bytes, the offset of each frame).
    fn three_delta_chain() -> (Replica, Vec<u8>, Vec<usize>) {
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        let mut v = ramp(100, 0.01);
        pull(&mut source, &mut replica, &v);
        let old = replica.state();
        for t in 0..3 {
            v[t * 10] += 1.0;
            source
                .serve(&v, None, three_lc(), Refinement::OFF, 0, &mut Vec::new())
                .unwrap();
        }
        let mut chain = Vec::new();
        let served = source
            .serve(&v, old, three_lc(), Refinement::OFF, 0, &mut chain)
            .unwrap();
        assert_eq!(served.served, Served::Chain(3));
        let limits = Limits::default();
        let parsed = Envelope::parse(&chain, &limits).unwrap();
        let mut at = HEADER_LEN;
        let offsets = parsed
            .frames()
            .iter()
            .map(|f| {
                let start = at;
                at += f.header.frame_len();
                start
            })
            .collect();
        (replica, chain, offsets)
    }

    #[test]
    fn a_bad_checksum_in_the_third_frame_leaves_the_replica_unchanged() {
        // Every frame's checksum is verified before the first is applied.
        let (mut replica, mut chain, _) = three_delta_chain();
        let before = (replica.state(), replica.replica_hash());
        let last = chain.len() - 1;
        chain[last] ^= 0x55;
        assert!(matches!(
            replica.apply(&chain, &Limits::default()),
            Err(ApplyError::Envelope(EnvelopeError::Frame {
                index: 2,
                source: DecodeError::Checksum { .. }
            }))
        ));
        assert_eq!((replica.state(), replica.replica_hash()), before);
    }

    /// Replaces the payload of the 3LC frame at `at` with zero runs that
    /// expand past the tensor, and fixes its checksum: the frame parses but
    /// does not decode.
    fn corrupt_payload(chain: &mut [u8], at: usize) {
        let f = tlc_codec::Frame::parse(&chain[at..], &Limits::default()).unwrap();
        let start = at + f.header.header_len();
        let end = start + f.payload.len();
        chain[start..end].fill(255);
        let crc = crc32c::crc32c(&chain[at..end]);
        chain[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn a_corrupt_third_frame_drops_the_replica() {
        let (mut replica, mut chain, offsets) = three_delta_chain();
        corrupt_payload(&mut chain, offsets[2]);
        let err = replica.apply(&chain, &Limits::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ApplyError::Dropped {
                    index: 2,
                    source: DecodeError::CorruptPayload(_)
                }
            ),
            "{err}"
        );
        assert_eq!(replica.state(), None);
        assert_eq!(replica.values(), None);
        assert_eq!(replica.replica_hash(), None);
    }

    #[test]
    fn a_corrupt_first_frame_changes_nothing() {
        let (mut replica, mut chain, offsets) = three_delta_chain();
        let before = (replica.state(), replica.replica_hash());
        corrupt_payload(&mut chain, offsets[0]);
        let err = replica.apply(&chain, &Limits::default()).unwrap_err();
        assert!(matches!(err, ApplyError::Decode { index: 0, .. }), "{err}");
        assert_eq!((replica.state(), replica.replica_hash()), before);
    }

    #[test]
    fn corrupted_chains_never_panic_nor_half_apply() {
        // Every single-byte corruption of a chain, with the header and
        // frame checksums made right again so the corruption gets past
        // them: the replica ends applied, unchanged, or dropped, never
        // anything else.
        let (replica, chain, offsets) = three_delta_chain();
        let limits = Limits { max_elements: 1000 };
        let ends: Vec<usize> = offsets
            .iter()
            .skip(1)
            .copied()
            .chain([chain.len()])
            .collect();
        let before = (replica.state(), replica.replica_hash());
        let mut outcomes = [0usize; 3];
        for at in 0..chain.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = chain.clone();
                bad[at] ^= flip;
                let crc = crc32c::crc32c(&bad[..44]);
                bad[44..48].copy_from_slice(&crc.to_le_bytes());
                for (&start, &end) in offsets.iter().zip(&ends) {
                    let crc = crc32c::crc32c(&bad[start..end - 4]);
                    bad[end - 4..end].copy_from_slice(&crc.to_le_bytes());
                }
                let mut r = replica.clone();
                match r.apply(&bad, &limits) {
                    Ok(values) => {
                        assert_eq!(values.len(), 100);
                        outcomes[0] += 1;
                    }
                    Err(ApplyError::Dropped { .. }) => {
                        assert_eq!(r.state(), None);
                        outcomes[1] += 1;
                    }
                    Err(_) => {
                        assert_eq!((r.state(), r.replica_hash()), before, "byte {at}");
                        outcomes[2] += 1;
                    }
                }
            }
        }
        // Corrupt payloads mostly still decode (to other trits): applied.
        assert!(outcomes[0] > 0 && outcomes[2] > 0, "{outcomes:?}");
    }

    #[test]
    fn chain_frames_must_fit_the_replica() {
        // A chain at the right base whose frames have another length.
        let mut source = PullSource::new(epoch(5), 8);
        let mut replica = Replica::new();
        pull(&mut source, &mut replica, &ramp(10, 1.0));
        let mut frame = Vec::new();
        Encoder::new(three_lc(), Feedback::Off)
            .encode(&ramp(11, 1.0), &mut frame)
            .unwrap();
        let mut chain = Vec::new();
        write_envelope(
            &EnvelopeHeader::chain(0, 5, 1, 2).unwrap(),
            &[frame],
            &mut chain,
        )
        .unwrap();
        assert_eq!(
            replica.apply(&chain, &Limits::default()).unwrap_err(),
            ApplyError::Length {
                replica: 10,
                frames: 11
            }
        );
        assert_eq!(
            replica.state(),
            Some(ReplicaState {
                epoch: 5,
                version: 1
            })
        );
    }

    #[test]
    fn keyframes_honour_the_limits() {
        let mut source = PullSource::new(epoch(5), 8);
        let mut key = Vec::new();
        source
            .serve(
                &ramp(1000, 1.0),
                None,
                three_lc(),
                Refinement::OFF,
                0,
                &mut key,
            )
            .unwrap();
        let mut replica = Replica::new();
        let err = replica
            .apply(&key, &Limits { max_elements: 999 })
            .unwrap_err();
        assert!(matches!(
            err,
            ApplyError::Envelope(EnvelopeError::Frame {
                source: DecodeError::TooManyElements { .. },
                ..
            })
        ));
        assert_eq!(replica.state(), None);
    }

    #[test]
    fn an_evicted_source_remade_with_a_new_epoch_sends_keyframes() {
        let epochs = EpochGenerator::new(u64::MAX);
        let first = epochs.next();
        let second = epochs.next();
        assert_eq!(first.get(), u64::MAX);
        assert_eq!(second.get(), 1); // 0 is skipped
        let mut source = PullSource::new(first, 8);
        let mut replica = Replica::new();
        let v = ramp(20, 1.0);
        pull(&mut source, &mut replica, &v);
        // The source is evicted and made again for the same tensor.
        let mut source = PullSource::new(second, 8);
        let served = pull(&mut source, &mut replica, &v);
        assert_eq!(served.served, Served::Keyframe(KeyframeReason::OtherEpoch));
    }

    #[test]
    fn replica_store_applies_under_its_key() {
        let store = ReplicaStore::new(TableLimits {
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(60),
        });
        let key = ReplicaKey {
            holder: "/job:ps/replica:0/task:0".into(),
            requester: "/job:worker/replica:0/task:0".into(),
            tensor: "w1/read".into(),
        };
        let now = Instant::now();
        assert_eq!(store.state(&key, now), None);
        let mut source = PullSource::new(epoch(9), 8);
        let v = ramp(64, 0.5);
        let mut wire = Vec::new();
        source
            .serve(
                &v,
                store.state(&key, now),
                three_lc(),
                Refinement::OFF,
                0,
                &mut wire,
            )
            .unwrap();
        let copy = store
            .apply(&key, &wire, &Limits::default(), now, <[f32]>::to_vec)
            .unwrap();
        assert_eq!(copy, v);
        assert_eq!(store.state(&key, now), source.state());
        assert_eq!(store.replica_hash(&key, now), Some(source.replica_hash()));
        assert_eq!(store.table().stats().contexts, 1);
        assert!(store.table().stats().memory_bytes >= 256);
        // Evicted: the next request asks for a keyframe.
        store.table().evict(now + Duration::from_secs(61));
        assert_eq!(store.state(&key, now), None);
    }
}
