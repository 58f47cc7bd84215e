//! The two doors to a tensor's state. [`Contexts::encode`] is where the
//! holder's sidecar turns a tensor into an envelope through the memory its
//! treatment keeps (an error buffer, the shared replica, or none);
//! [`Contexts::restore`] is where the requester's sidecar turns an envelope
//! back into the tensor (decoded alone, or applied to its replica).
//!
//! Behind the doors are the three bounded tables ([`crate::table`]) and the
//! epoch of this sidecar's replicas. Which treatment a tensor gets, what the
//! call was and how the response travels are the caller's business.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use thiserror::Error;
use tlc_codec::{Codec, CodecId, EntropyStage, Feedback, Limits};
use tlc_core::TensorCall;
use tlc_wire::envelope::{EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN};

use crate::pull::{
    ApplyError, EpochGenerator, PullSource, ReplicaKey, ReplicaState, ReplicaStore, Requester,
    Served, SourceKey,
};
use crate::push::{decode_push, encode_stateless, PushContext, PushError, PushKey};
use crate::refine::Refinement;
use crate::table::{lock, ContextTable, Evicted, TableLimits, TableStats};

/// What a context holds beside its tensor-sized buffers (its fields, the
/// table's entry), rounded up: an estimate made before the context exists
/// must not be below what it will measure.
const CONTEXT_OVERHEAD: usize = 1 << 10;

/// The memory a tensor is encoded through, as its treatment decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Memory {
    /// A dense gradient: the error buffer kept for its requester.
    ErrorFeedback {
        /// Whether the buffer is used at all (a codec may run without).
        feedback: Feedback,
        /// How far the buffer may lag before further passes are sent.
        refine: Refinement,
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
    /// Anything else: encoded on its own, nothing remembered.
    None,
}

/// How to encode one tensor: the codec, the memory its treatment keeps,
/// and the token the requester may ask for the original response with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Encoding {
    /// The codec, with its parameters.
    pub codec: Codec,
    /// The state the tensor is encoded through.
    pub memory: Memory,
    /// Written into the envelope, for a fallback to the original.
    pub fallback_token: u64,
    /// Whether frames may carry the entropy stage (the requester reads
    /// it; see `codec/FORMAT.md`).
    pub entropy: EntropyStage,
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
}

/// Why a tensor could not be encoded; it then crosses as it is.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EncodeRefused {
    /// Its context would not fit in the table's memory budget.
    #[error("no room for the tensor's context in the memory budget")]
    Budget,
    /// The codec refused the values (non-finite, or not its kind).
    #[error("the codec refused the tensor")]
    Codec,
}

impl EncodeRefused {
    /// The pass-through reason, for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            EncodeRefused::Budget => "context_budget",
            EncodeRefused::Codec => "codec_refused",
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
    /// A rows envelope: restored with the call's lookup ids through
    /// [`crate::rows`], not here.
    #[error("{0} envelope: rows are restored with their lookup ids (tlc_context::rows)")]
    Rows(Kind),
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
/// sources, the requester's replicas.
pub struct Contexts {
    push: ContextTable<PushKey, PushContext>,
    pull: ContextTable<SourceKey, PullSource>,
    replicas: ReplicaStore,
    epochs: EpochGenerator,
    pull_cache_len: usize,
}

impl Contexts {
    /// Empty tables within `limits`; pull sources take their epochs from a
    /// generator seeded with `seed`.
    pub fn new(limits: ContextLimits, seed: u64) -> Contexts {
        Contexts {
            push: ContextTable::new(limits.push),
            pull: ContextTable::new(limits.pull),
            replicas: ReplicaStore::new(limits.replicas),
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
        } = encoding;
        let raw_bytes = 4 * values.len();
        let mut encoded = Encoded {
            took: Duration::ZERO,
            keyframe: false,
            refinements: 0,
            drift_reset: None,
            settled: false,
            critical: false,
        };
        match memory {
            Memory::ErrorFeedback { feedback, refine } => {
                let key = PushKey {
                    requester_task: call.requester_task.clone(),
                    holder_task: call.holder_task.clone(),
                    tensor: call.tensor.clone(),
                };
                // An error buffer the size of the tensor, once used.
                let context = self
                    .push
                    .get_or_insert_within(&key, now, raw_bytes + CONTEXT_OVERHEAD, || {
                        PushContext::new(codec, feedback)
                    })
                    .ok_or(EncodeRefused::Budget)?;
                let mut context = lock(&context);
                context.set_entropy_stage(entropy);
                let started = Instant::now();
                let pushed = context
                    .encode(values, codec, refine, fallback_token, out)
                    .map_err(|_| EncodeRefused::Codec)?;
                encoded.took = started.elapsed();
                encoded.refinements = u64::from(pushed.frames - 1);
                encoded.critical = pushed.critical;
            }
            Memory::Replica { requester, refine } => {
                let key = SourceKey {
                    holder: call.holder_task.clone(),
                    tensor: call.tensor.clone(),
                };
                // A replica the size of the tensor, and its cached deltas.
                let source = self
                    .pull
                    .get_or_insert_within(&key, now, 2 * raw_bytes + CONTEXT_OVERHEAD, || {
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
                encoded.took = started.elapsed();
                encoded.keyframe = matches!(served.served, Served::Keyframe(_));
                encoded.refinements = after.refinements - before.refinements;
                encoded.settled = after.settles > before.settles;
                if after.drift_resets > before.drift_resets {
                    encoded.drift_reset = Some(before.drift_resets == 0);
                }
            }
            Memory::None => {
                let started = Instant::now();
                encode_stateless(values, codec, entropy, fallback_token, out)
                    .map_err(|_| EncodeRefused::Codec)?;
                encoded.took = started.elapsed();
            }
        }
        Ok(encoded)
    }

    /// Restores the tensor `call` asked for from `envelope`, decoding at
    /// most `limits`: a push envelope alone (`whole` gets the values), a
    /// pull envelope into the requester's replica (`copy` gets them while
    /// the replica is locked). After a failure the caller drops the replica
    /// ([`Contexts::forget_replica`]), so the next pull starts from a
    /// keyframe.
    pub fn restore<T>(
        &self,
        call: &TensorCall,
        envelope: &[u8],
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
            (Kind::RowsPull | Kind::RowsPush, _) => return Err(RestoreError::Rows(header.kind)),
        };
        Ok(Restored {
            content,
            codec,
            keyframe: header.kind == Kind::Keyframe,
            took: started.elapsed(),
        })
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
    pub fn push(&self) -> &ContextTable<PushKey, PushContext> {
        &self.push
    }

    /// The holder's pull sources.
    pub fn pull(&self) -> &ContextTable<SourceKey, PullSource> {
        &self.pull
    }

    /// The requester's replicas.
    pub fn replicas(&self) -> &ReplicaStore {
        &self.replicas
    }

    /// The next epoch a pull source would get (for tests of restarts).
    pub fn next_epoch(&self) -> NonZeroU64 {
        self.epochs.next()
    }

    /// New bounds for every table, applied at the next eviction.
    pub fn set_limits(&self, limits: TableLimits) {
        self.push.set_limits(limits);
        self.pull.set_limits(limits);
        self.replicas.table().set_limits(limits);
    }

    /// Drops contexts idle too long or beyond their tables' budgets:
    /// what each table freed (push, pull, replicas).
    pub fn evict(&self, now: Instant) -> [Evicted; 3] {
        [
            self.push.evict(now),
            self.pull.evict(now),
            self.replicas.table().evict(now),
        ]
    }

    /// Size of each table (push, pull, replicas).
    pub fn sizes(&self) -> [TableStats; 3] {
        [
            self.push.stats(),
            self.pull.stats(),
            self.replicas.table().stats(),
        ]
    }
}

/// The replica a pull from a parameter task goes into; `None` for a push.
fn replica_key(call: &TensorCall) -> Option<ReplicaKey> {
    (call.direction == tlc_core::Direction::Pull).then(|| ReplicaKey {
        holder: call.holder_task.clone(),
        requester: call.requester_task.clone(),
        tensor: call.tensor.clone(),
    })
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

#[cfg(test)]
mod tests {
    use tlc_codec::Sparsity;
    use tlc_core::Direction;

    use super::*;
    use crate::pull::Reads;

    const HOUR: Duration = Duration::from_secs(3600);

    fn contexts(max_bytes: usize) -> Contexts {
        let table = TableLimits {
            max_bytes,
            max_age: HOUR,
        };
        Contexts::new(
            ContextLimits {
                push: table,
                pull: table,
                replicas: table,
                pull_cache_len: 4,
            },
            7,
        )
    }

    fn call(direction: Direction) -> TensorCall {
        TensorCall {
            tensor: "w1/read".into(),
            tensor_name: "edge_3_w1/read".into(),
            holder_task: "/job:ps/replica:0/task:0".into(),
            holder_incarnation: 1,
            requester_task: "/job:worker/replica:0/task:0".into(),
            direction,
            step_id: 1,
        }
    }

    fn three_lc() -> Codec {
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        }
    }

    fn encoding(memory: Memory) -> Encoding {
        Encoding {
            codec: three_lc(),
            memory,
            fallback_token: 9,
            entropy: EntropyStage::Off,
        }
    }

    fn values(step: u32) -> Vec<f32> {
        (0..1000)
            .map(|i| (i as f32 * 0.37).sin() + 1e-3 * step as f32 * (i as f32 * 0.11).cos())
            .collect()
    }

    fn limits() -> Limits {
        Limits { max_elements: 1000 }
    }

    /// The requester's side of a pull envelope, its values copied out.
    fn restore_pull(
        requester: &Contexts,
        pull: &TensorCall,
        envelope: &[u8],
        now: Instant,
    ) -> Restored<Vec<f32>> {
        requester
            .restore(
                pull,
                envelope,
                &limits(),
                now,
                // An exact read's answer: the values alone, no replica.
                |values| values,
                <[f32]>::to_vec,
            )
            .unwrap()
    }

    /// The holder's pull source of `pull`'s tensor.
    fn pull_source(
        holder: &Contexts,
        pull: &TensorCall,
        now: Instant,
    ) -> std::sync::Arc<std::sync::Mutex<PullSource>> {
        let key = SourceKey {
            holder: pull.holder_task.clone(),
            tensor: pull.tensor.clone(),
        };
        holder.pull().get(&key, now).unwrap()
    }

    #[test]
    fn a_pull_is_a_keyframe_then_deltas_and_both_replicas_agree() {
        let (holder, requester) = (contexts(1 << 30), contexts(1 << 30));
        let pull = call(Direction::Pull);
        let now = Instant::now();
        for step in 0..3 {
            let memory = Memory::Replica {
                requester: requester.replica_state(&pull, now).into(),
                refine: Refinement::OFF,
            };
            let mut envelope = Vec::new();
            let encoded = holder
                .encode(&pull, &values(step), encoding(memory), now, &mut envelope)
                .unwrap();
            assert_eq!(encoded.keyframe, step == 0, "step {step}");
            let restored = restore_pull(&requester, &pull, &envelope, now);
            assert_eq!(restored.keyframe, step == 0);
            let source = pull_source(&holder, &pull, now);
            assert_eq!(lock(&source).replica(), restored.content.as_slice());
        }
        assert_eq!(holder.sizes()[1].contexts, 1);
        assert_eq!(requester.sizes()[2].contexts, 1);
    }

    #[test]
    fn an_exact_read_is_the_model_and_moves_no_replica() {
        let (holder, requester, other) = (contexts(1 << 30), contexts(1 << 30), contexts(1 << 30));
        let pull = call(Direction::Pull);
        let now = Instant::now();
        // `pull` reads steps 0..3 as training does, `other` only step 0.
        let read = |from: &Contexts, step, exact| {
            let memory = Memory::Replica {
                requester: Requester {
                    reads: if exact { Reads::Exact } else { Reads::Replica },
                    ..from.replica_state(&pull, now).into()
                },
                refine: Refinement::OFF,
            };
            let mut envelope = Vec::new();
            holder
                .encode(&pull, &values(step), encoding(memory), now, &mut envelope)
                .unwrap();
            let restored = restore_pull(from, &pull, &envelope, now);
            (restored.content, envelope.len())
        };
        read(&other, 0, false);
        for step in 0..3 {
            read(&requester, step, false);
        }
        let (approximate, _) = read(&requester, 2, false);
        assert_ne!(approximate, values(2), "3LC leaves the replica off");
        let state = requester.replica_state(&pull, now);
        // An evaluation: the model, bit for bit, as large as the model,
        // and every time.
        for _ in 0..2 {
            let (exact, bytes) = read(&requester, 2, true);
            assert_eq!(exact, values(2));
            assert!(bytes >= 4 * values(2).len(), "{bytes} bytes");
        }
        // No replica moved: the requester's is where training left it, and
        // a requester behind gets what training would have given it.
        assert_eq!(requester.replica_state(&pull, now), state);
        let (again, _) = read(&requester, 2, false);
        assert_eq!(again, approximate);
        let (behind, _) = read(&other, 2, false);
        assert_eq!(behind, approximate);
        let counters = lock(&pull_source(&holder, &pull, now)).counters();
        assert_eq!(counters.settles, 2, "two exact reads");
        assert_eq!(counters.resets, 1, "only the first value");
    }

    #[test]
    fn a_push_keeps_its_error_buffer_and_decodes_alone() {
        let (holder, requester) = (contexts(1 << 30), contexts(1 << 30));
        let push = call(Direction::Push);
        let now = Instant::now();
        let memory = Memory::ErrorFeedback {
            feedback: Feedback::On,
            refine: Refinement::OFF,
        };
        let mut envelope = Vec::new();
        holder
            .encode(&push, &values(0), encoding(memory), now, &mut envelope)
            .unwrap();
        let restored = requester
            .restore(&push, &envelope, &limits(), now, |v| v, |_| unreachable!())
            .unwrap();
        assert_eq!(restored.content.len(), 1000);
        assert_eq!(restored.codec, CodecId::ThreeLc);
        assert_eq!(holder.sizes()[0].contexts, 1);
        assert_eq!(requester.sizes()[2].contexts, 0);
    }

    #[test]
    fn refusals_name_their_reason() {
        let tiny = contexts(16);
        let push = call(Direction::Push);
        let now = Instant::now();
        let memory = Memory::ErrorFeedback {
            feedback: Feedback::On,
            refine: Refinement::OFF,
        };
        let refused = tiny
            .encode(&push, &values(0), encoding(memory), now, &mut Vec::new())
            .unwrap_err();
        assert_eq!(refused.label(), "context_budget");

        let holder = contexts(1 << 30);
        let pull = call(Direction::Pull);
        let memory = Memory::Replica {
            requester: None.into(),
            refine: Refinement::OFF,
        };
        let mut envelope = Vec::new();
        holder
            .encode(&pull, &values(0), encoding(memory), now, &mut envelope)
            .unwrap();
        let err = holder
            .restore(&push, &envelope, &limits(), now, |v| v, <[f32]>::to_vec)
            .unwrap_err();
        assert!(matches!(err, RestoreError::NotAPull), "{err}");
    }

    #[test]
    fn first_frame_codec_reads_the_frame_header() {
        let codec = Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        };
        let mut source = PullSource::new(NonZeroU64::new(7).unwrap(), 4);
        let v1: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01).collect();
        let v2: Vec<f32> = v1.iter().map(|v| v + 0.5).collect();
        let mut keyframe = Vec::new();
        let first = source
            .serve(&v1, None, codec, Refinement::OFF, 1, &mut keyframe)
            .unwrap();
        assert_eq!(first_frame_codec(&keyframe), CodecId::None);
        let mut up_to_date = Vec::new();
        source
            .serve(
                &v1,
                Some(first.state),
                codec,
                Refinement::OFF,
                2,
                &mut up_to_date,
            )
            .unwrap();
        assert_eq!(first_frame_codec(&up_to_date), CodecId::None);
        let mut chain = Vec::new();
        source
            .serve(
                &v2,
                Some(first.state),
                codec,
                Refinement::OFF,
                3,
                &mut chain,
            )
            .unwrap();
        assert_eq!(EnvelopeHeader::parse(&chain).unwrap().kind, Kind::Chain);
        assert_eq!(first_frame_codec(&chain), CodecId::ThreeLc);
    }
}
