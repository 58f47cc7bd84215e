//! The two doors to a tensor's state. [`Contexts::encode`] is where the
//! holder's sidecar turns a tensor into an envelope through the memory its
//! treatment keeps (an error buffer, the shared replica, or none);
//! [`Contexts::restore`] is where the requester's sidecar turns an envelope
//! back into the tensor (decoded alone, or applied to its replica).
//!
//! Behind the doors are the bounded tables ([`crate::table`]): error
//! buffers, pull sources, replicas, the workers' agreement meters and the
//! row contexts ([`rows`]), and the epoch of this sidecar's replicas. Which treatment a tensor gets, what the
//! call was and how the response travels are the caller's business.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use thiserror::Error;
use tlc_codec::{Codec, CodecId, EntropyStage, Feedback, Limits};
use tlc_core::{TensorCall, TensorKey};
use tlc_wire::envelope::{EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN};

use crate::pull::{
    replica_hash, ApplyError, EpochGenerator, PullSource, ReplicaState, ReplicaStore, Requester,
    Served,
};
use crate::push::{decode_push, encode_stateless, PushContext, PushError};
use crate::refine::Refinement;
use crate::regime::agreement::{AgreementMeter, AgreementPool};
use crate::table::{lock, ContextTable, Evicted, TableLimits, TableStats};

/// What a context holds beside its tensor-sized buffers (its fields, the
/// table's entry), rounded up: an estimate made before the context exists
/// must not be below what it will measure.
const CONTEXT_OVERHEAD: usize = 1 << 10;

mod rows;

pub use rows::{RowCounters, RowKind, RowMemory, RowTables, RowsRefused};

/// The memory a tensor is encoded through, as its treatment decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Memory<'a> {
    /// A dense gradient: the error buffer kept for its requester.
    ErrorFeedback {
        /// Whether the buffer is used at all (a codec may run without).
        feedback: Feedback,
        /// How far the buffer may lag before further passes are sent.
        refine: Refinement,
        /// What the requester said of the workers' agreement on this
        /// tensor (`tlc-agree`), for the fidelity controller.
        agreement: Option<f64>,
    },
    /// A dense variable read: the replica every requester shares, and the
    /// deltas from the version this requester holds.
    Replica {
        /// Who reads: the replica they hold, the first keyframe they read,
        /// and whether they need the value itself.
        requester: Requester,
        /// How far the replica may lag before further versions are sent.
        refine: Refinement,
    },
    /// Embedding rows or gradient rows, keyed by the step's ids: a mirror
    /// of the requester's rows (pulls), an error buffer per row (pushes).
    Rows(RowMemory<'a>),
    /// Anything else: encoded on its own, nothing remembered.
    None,
}

/// How to encode one tensor: the codec, the memory its treatment keeps,
/// and the token the requester may ask for the original response with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Encoding<'a> {
    /// The codec, with its parameters.
    pub codec: Codec,
    /// The state the tensor is encoded through.
    pub memory: Memory<'a>,
    /// Written into the envelope, for a fallback to the original.
    pub fallback_token: u64,
    /// Whether frames may carry the entropy stage (the requester reads
    /// it; see `codec/FORMAT.md`).
    pub entropy: EntropyStage,
    /// Whether to say, in [`Encoded::mirror`], what the requester should
    /// restore (the requester checks it).
    pub mirror: bool,
}

/// What one encode did, for the caller's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// The codec's work, timed under the context's lock (not the wait for
    /// another call on the same tensor).
    pub took: Duration,
    /// The envelope is a pull keyframe: the whole replica.
    pub keyframe: bool,
    /// Passes sent beyond the first: further 3LC frames (pushes) or versions
    /// (pulls).
    pub refinements: u64,
    /// The pull replica drifted too far from the model and was reset; `Some(true)`
    /// the first time for this tensor, when an operator should hear of it.
    pub drift_reset: Option<bool>,
    /// The pull replica was brought to the value bit for bit (an exact
    /// read, or a read again of a value that stopped changing).
    pub settled: bool,
    /// The push was encoded while its stream was in a critical regime
    /// (the fidelity controller's tighter lag bound).
    pub critical: bool,
    /// With [`Encoding::mirror`]: the [`replica_hash`] of the values the
    /// requester should hand TensorFlow from the envelope (for a pull, of
    /// the holder's replica after the call).
    pub mirror: Option<u64>,
}

impl Encoded {
    /// An encode that did nothing worth counting: the start of every
    /// memory's own account.
    const NOTHING: Encoded = Encoded {
        took: Duration::ZERO,
        keyframe: false,
        refinements: 0,
        drift_reset: None,
        settled: false,
        critical: false,
        mirror: None,
    };
}

/// Why a tensor could not be encoded; it then crosses as it is.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum EncodeRefused {
    /// Its context would not fit in the table's memory budget.
    #[error("no room for the tensor's context in the memory budget")]
    Budget,
    /// The codec refused the values (non-finite, or not its kind).
    #[error("the codec refused the tensor")]
    Codec,
    /// Its rows could not be kept (the caller encodes it without memory).
    #[error(transparent)]
    Rows(#[from] RowsRefused),
}

impl EncodeRefused {
    /// The pass-through reason, for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            EncodeRefused::Budget => "context_budget",
            EncodeRefused::Codec => "codec_refused",
            EncodeRefused::Rows(refused) => refused.label(),
        }
    }
}

/// A tensor restored from an envelope.
#[derive(Debug)]
pub struct Restored<T> {
    /// The values, as the caller's `take` made them.
    pub content: T,
    /// The codec of the (first) frame.
    pub codec: CodecId,
    /// The envelope was a pull keyframe.
    pub keyframe: bool,
    /// Time spent decoding.
    pub took: Duration,
}

/// Why an envelope could not be restored; the caller falls back to the
/// original response.
#[derive(Debug, Error)]
pub enum RestoreError {
    /// The envelope's header or frames are not valid.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// A pushed envelope could not be decoded.
    #[error(transparent)]
    Push(#[from] PushError),
    /// A pull envelope does not fit the replica.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// A pull envelope came for a call that is not a pull.
    #[error("pull envelope for a call that is not a pull")]
    NotAPull,
    /// A rows envelope for a call without the step's lookup ids.
    #[error("a {0} envelope whose ids this side did not see")]
    NoIds(Kind),
    /// A rows envelope that does not fit the ids or this side's rows.
    #[error("{0}")]
    Rows(String),
}

/// The bounds of the three tables.
#[derive(Debug, Clone, Copy)]
pub struct ContextLimits {
    /// Push contexts (error buffers), by memory and idle time.
    pub push: TableLimits,
    /// Pull sources (the holder's replicas and delta caches).
    pub pull: TableLimits,
    /// Replicas kept by the requester side.
    pub replicas: TableLimits,
    /// Deltas each pull source keeps for requesters that fall behind.
    pub pull_cache_len: usize,
}

/// Every tensor context of one sidecar: the holder's error buffers and pull
/// sources, the requester's replicas and agreement meters.
pub struct Contexts {
    push: ContextTable<TensorKey, PushContext>,
    /// Bounded as the push table is (gradient state, on the other side).
    agreement: ContextTable<TensorKey, AgreementMeter>,
    /// The whole gradient's agreement, by requester task.
    agreement_pools: ContextTable<String, AgreementPool>,
    pull: ContextTable<TensorKey, PullSource>,
    replicas: ReplicaStore,
    rows: RowTables,
    epochs: EpochGenerator,
    pull_cache_len: usize,
}

impl Contexts {
    /// Empty tables within `limits`; pull sources take their epochs from a
    /// generator seeded with `seed`.
    pub fn new(limits: ContextLimits, seed: u64) -> Contexts {
        Contexts {
            push: ContextTable::new(limits.push),
            agreement: ContextTable::new(limits.push),
            agreement_pools: ContextTable::new(limits.push),
            pull: ContextTable::new(limits.pull),
            replicas: ReplicaStore::new(limits.replicas),
            rows: RowTables::new(limits.pull, limits.replicas),
            epochs: EpochGenerator::new(seed),
            pull_cache_len: limits.pull_cache_len,
        }
    }

    /// Encodes `values`, the tensor `call` asks for, into `out` (an
    /// envelope) as `encoding` says.
    pub fn encode(
        &self,
        call: &TensorCall,
        values: &[f32],
        encoding: Encoding,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Result<Encoded, EncodeRefused> {
        let Encoding {
            codec,
            memory,
            fallback_token,
            entropy,
            mirror,
        } = encoding;
        let start = out.len();
        let how = (codec, fallback_token, entropy);
        let mut encoded = match memory {
            Memory::ErrorFeedback {
                feedback,
                refine,
                agreement,
            } => {
                let memory = (feedback, refine, agreement);
                self.encode_push(call, values, memory, how, now, out)?
            }
            Memory::Replica { requester, refine } => {
                let source = (requester, refine, mirror);
                self.encode_pull(call, values, source, how, now, out)?
            }
            Memory::Rows(rows) => {
                let how = (rows, codec, fallback_token, entropy);
                // Rows are not checked: no hash for them.
                return Ok(self
                    .rows
                    .encode(&call.key(), values, how, (&self.epochs, now), out)?);
            }
            Memory::None => {
                let started = Instant::now();
                encode_stateless(values, codec, entropy, fallback_token, out)
                    .map_err(|_| EncodeRefused::Codec)?;
                Encoded {
                    took: started.elapsed(),
                    ..Encoded::NOTHING
                }
            }
        };
        // A push envelope (a gradient, or a tensor without memory) is
        // checked by its own decode; a pull above, by the replica it leaves.
        if mirror && encoded.mirror.is_none() {
            encoded.mirror = decoded_hash(&out[start..], values.len());
        }
        Ok(encoded)
    }

    /// A gradient through the error buffer `call`'s holder keeps for its
    /// requester.
    fn encode_push(
        &self,
        call: &TensorCall,
        values: &[f32],
        (feedback, refine, agreement): (Feedback, Refinement, Option<f64>),
        (codec, fallback_token, entropy): (Codec, u64, EntropyStage),
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Result<Encoded, EncodeRefused> {
        // An error buffer the size of the tensor, once used.
        let expected = 4 * values.len() + CONTEXT_OVERHEAD;
        let context = self
            .push
            .get_or_insert_within(&call.key(), now, expected, || {
                PushContext::new(codec, feedback)
            })
            .ok_or(EncodeRefused::Budget)?;
        let mut context = lock(&context);
        context.set_entropy_stage(entropy);
        context.hear_agreement(agreement);
        let started = Instant::now();
        let pushed = context
            .encode(values, codec, refine, fallback_token, out)
            .map_err(|_| EncodeRefused::Codec)?;
        Ok(Encoded {
            took: started.elapsed(),
            refinements: u64::from(pushed.frames - 1),
            critical: pushed.critical,
            ..Encoded::NOTHING
        })
    }

    /// A model value through the replica every requester shares, as a
    /// delta from the version this requester holds (or a keyframe).
    fn encode_pull(
        &self,
        call: &TensorCall,
        values: &[f32],
        (requester, refine, mirror): (Requester, Refinement, bool),
        (codec, fallback_token, entropy): (Codec, u64, EntropyStage),
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Result<Encoded, EncodeRefused> {
        // One source for every requester: the pull encoded once. A replica
        // the size of the tensor, and its cached deltas.
        let key = call.key().for_every_requester();
        let expected = 8 * values.len() + CONTEXT_OVERHEAD;
        let source = self
            .pull
            .get_or_insert_within(&key, now, expected, || {
                PullSource::new(self.epochs.next(), self.pull_cache_len)
            })
            .ok_or(EncodeRefused::Budget)?;
        let mut source = lock(&source);
        source.set_entropy_stage(entropy);
        let started = Instant::now();
        let before = source.counters();
        let served = source
            .serve(values, requester, codec, refine, fallback_token, out)
            .map_err(|_| EncodeRefused::Codec)?;
        let after = source.counters();
        Ok(Encoded {
            took: started.elapsed(),
            keyframe: matches!(served.served, Served::Keyframe(_)),
            refinements: after.refinements - before.refinements,
            settled: after.settles > before.settles,
            drift_reset: (after.drift_resets > before.drift_resets)
                .then_some(before.drift_resets == 0),
            mirror: mirror.then(|| source.restored_hash(served.served, values)),
            ..Encoded::NOTHING
        })
    }

    /// Restores the tensor `call` asked for from `envelope`, decoding at
    /// most `limits`: a push envelope alone (`whole` gets the values), a
    /// pull envelope into the requester's replica (`copy` gets them while
    /// the replica is locked), a row-keyed envelope with the step's
    /// `row_ids` (`whole`). After a failure the caller drops the replica
    /// ([`Contexts::forget_replica`]), so the next pull starts from a
    /// keyframe.
    pub fn restore<T>(
        &self,
        call: &TensorCall,
        (envelope, row_ids): (&[u8], Option<&[i64]>),
        limits: &Limits,
        now: Instant,
        whole: impl FnOnce(Vec<f32>) -> T,
        copy: impl FnOnce(&[f32]) -> T,
    ) -> Result<Restored<T>, RestoreError> {
        let header = EnvelopeHeader::parse(envelope)?;
        let started = Instant::now();
        let (content, codec) = match (header.kind, replica_key(call)) {
            // A push envelope is a whole tensor without memory: what
            // gradients get, and pulls too when the holder keeps no replica
            // for them (gathered rows, tensors no graph classified).
            (Kind::Push, _) => {
                let mut values = Vec::new();
                let decoded = decode_push(envelope, limits, &mut values)?;
                (whole(values), decoded.frame.codec())
            }
            (Kind::Chain | Kind::Keyframe, Some(key)) => {
                let content = self.replicas.apply(&key, envelope, limits, now, copy)?;
                (content, first_frame_codec(envelope))
            }
            (Kind::Chain | Kind::Keyframe, None) => return Err(RestoreError::NotAPull),
            (Kind::RowsPull | Kind::RowsPush, _) => {
                let ids = row_ids.ok_or(RestoreError::NoIds(header.kind))?;
                let (values, codec) = self
                    .rows
                    .restore(&call.key(), (envelope, limits), ids, now)
                    .map_err(RestoreError::Rows)?;
                (whole(values), codec)
            }
        };
        Ok(Restored {
            content,
            codec,
            keyframe: header.kind == Kind::Keyframe,
            took: started.elapsed(),
        })
    }

    /// Counts `values`, a push `call` restored, in the agreement of the
    /// workers' gradients its requester collects (over windows of `window`
    /// steps). A tensor whose meter does not fit the push table's budget
    /// is not measured.
    pub fn measure_agreement(&self, call: &TensorCall, values: &[f32], window: u32, now: Instant) {
        let key = agreement_key(call);
        let expected = 4 * values.len() + CONTEXT_OVERHEAD;
        let Some(meter) =
            self.agreement
                .get_or_insert_within(&key, now, expected, AgreementMeter::default)
        else {
            return;
        };
        let round = lock(&meter).observe(name_hash(&call.holder_task), values);
        let Some(round) = round else {
            return;
        };
        let pool = self.agreement_pools.get_or_insert_within(
            &call.requester_task,
            now,
            CONTEXT_OVERHEAD,
            AgreementPool::default,
        );
        if let Some(pool) = pool {
            lock(&pool).add(name_hash(&call.tensor), round, window);
        }
    }

    /// The agreement measured on the gradients `call`'s requester
    /// collects, to say in the request; `None` before a window of two
    /// workers' pushes.
    pub fn agreement(&self, call: &TensorCall, now: Instant) -> Option<f64> {
        let pool = self.agreement_pools.get(&call.requester_task, now)?;
        let agreement = lock(&pool).agreement();
        agreement
    }

    /// The requester's replica of the tensor `call` pulls, to announce in
    /// its request; `None` for a push or a tensor with no replica yet.
    pub fn replica_state(&self, call: &TensorCall, now: Instant) -> Option<ReplicaState> {
        replica_key(call).and_then(|key| self.replicas.state(&key, now))
    }

    /// Drops the requester's replica of `call`'s tensor after a failed
    /// restore: the next pull starts from a keyframe.
    pub fn forget_replica(&self, call: &TensorCall) {
        if let Some(key) = replica_key(call) {
            self.replicas.table().remove(&key);
        }
    }

    /// The holder's error buffers.
    pub fn push(&self) -> &ContextTable<TensorKey, PushContext> {
        &self.push
    }

    /// The holder's pull sources.
    pub fn pull(&self) -> &ContextTable<TensorKey, PullSource> {
        &self.pull
    }

    /// The requester's replicas.
    pub fn replicas(&self) -> &ReplicaStore {
        &self.replicas
    }

    /// The row contexts: their counters, sizes, and what a requester
    /// announces of its rows.
    pub fn rows(&self) -> &RowTables {
        &self.rows
    }

    /// The next epoch a pull source would get (for tests of restarts).
    pub fn next_epoch(&self) -> NonZeroU64 {
        self.epochs.next()
    }

    /// New bounds for every table, applied at the next eviction.
    pub fn set_limits(&self, limits: TableLimits) {
        self.push.set_limits(limits);
        self.agreement.set_limits(limits);
        self.agreement_pools.set_limits(limits);
        self.pull.set_limits(limits);
        self.replicas.table().set_limits(limits);
        self.rows.set_limits(limits);
    }

    /// Drops contexts idle too long or beyond their tables' budgets:
    /// what each table freed (push, with the agreement meters; pull;
    /// replicas; the row contexts are bounded the same way, and counted
    /// apart).
    pub fn evict(&self, now: Instant) -> [Evicted; 3] {
        let evicted = [
            self.push
                .evict(now)
                .and(self.agreement.evict(now))
                .and(self.agreement_pools.evict(now)),
            self.pull.evict(now),
            self.replicas.table().evict(now),
        ];
        self.rows.evict(now);
        evicted
    }

    /// Size of each table (push, with the agreement meters; pull;
    /// replicas).
    pub fn sizes(&self) -> [TableStats; 3] {
        [
            self.push
                .stats()
                .and(self.agreement.stats())
                .and(self.agreement_pools.stats()),
            self.pull.stats(),
            self.replicas.table().stats(),
        ]
    }
}

/// The tensor a requester measures the workers' agreement on: one meter
/// for the pushes of every holder (the node name is the same from every
/// worker).
fn agreement_key(call: &TensorCall) -> TensorKey {
    call.key().for_every_holder()
}

/// A holder's or tensor's name as the agreement meters tell them apart (a
/// collision makes two workers one, which closes rounds early, or two
/// tensors one, which lengthens a window: fewer rounds, not wrong ones).
fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

/// The replica a pull from a parameter task goes into; `None` for a push.
fn replica_key(call: &TensorCall) -> Option<TensorKey> {
    (call.direction == tlc_core::Direction::Pull).then(|| call.key())
}

/// The codec of a pull envelope's first frame, read from the frame header
/// (4 magic bytes and the version, then the codec byte: codec/FORMAT.md);
/// `none` for an empty chain. Called only on an envelope just applied, so
/// the byte has been checked; reading it costs no second parse.
fn first_frame_codec(envelope: &[u8]) -> CodecId {
    envelope
        .get(HEADER_LEN + 5)
        .and_then(|&byte| CodecId::from_byte(byte))
        .unwrap_or(CodecId::None)
}

/// The [`replica_hash`] of what `envelope`, a push envelope of `elements`
/// values, decodes to: what a requester checking it should get. `None` if
/// it does not decode.
fn decoded_hash(envelope: &[u8], elements: usize) -> Option<u64> {
    let limits = Limits {
        max_elements: elements as u64,
    };
    let mut values = Vec::new();
    decode_push(envelope, &limits, &mut values).ok()?;
    Some(replica_hash(&values))
}

#[cfg(test)]
mod tests;
