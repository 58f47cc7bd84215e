//! What a pull asks of a [`PullSource`](super::PullSource) and what it
//! gets: who reads and what the read needs, the answer, and the source's
//! running totals.

use tlc_codec::Codec;

use super::ReplicaState;

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

/// The kind of answer [`PullSource::serve`](super::PullSource::serve) gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The requester is at the current version: an empty chain.
    UpToDate,
    /// A chain of this many cached deltas.
    Chain(u32),
    /// The replica itself.
    Keyframe(KeyframeReason),
    /// The value itself, in a push envelope no replica applies (an exact
    /// read).
    Exact,
}

/// What a read needs of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reads {
    /// The replica, within the refinement's bound.
    #[default]
    Replica,
    /// The replica, but a read of a value that has not changed since the
    /// requester's last read of it gets the value itself, bit for bit
    /// (once training stops, a variable is frozen or an evaluation reads
    /// again), as [`Reads::Exact`] does.
    SettleRereads,
    /// The value itself, bit for bit, every time (an evaluation, a
    /// checkpoint), in a stateless lossless envelope: neither the shared
    /// replica nor the requester's moves. Settling the shared replica
    /// instead made a training job's next deltas depend on whether an
    /// evaluation's read came before or after the step's update, that is
    /// on timing, and its trajectory with them.
    Exact,
    /// The shared replica brought to the value by a lossless delta that
    /// every requester's chain can carry (the link decision's settling
    /// call, after raw answers): this requester's replica becomes the
    /// model.
    Settle,
}

/// Who asks for a pull: the replica they hold, whether they read a lossy
/// first keyframe, and what the read needs. `None` or `Some(state)`
/// converts into a requester that reads lossless keyframes and replicas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Requester {
    /// The requester's replica, as its request said.
    pub has: Option<ReplicaState>,
    /// The codec of a tensor's first keyframe, if the requester reads one
    /// (`int8`): a source that has no value yet holds the first value as
    /// this codec's decode, where that is within the refinement's target
    /// of it, and sends that frame as the keyframe instead of 4 bytes per
    /// value. The replica is then exactly the decode on both sides, so
    /// every later delta applies as before.
    pub first_keyframe: Option<Codec>,
    /// What the read needs: the replica, or the value itself.
    pub reads: Reads,
}

impl From<Option<ReplicaState>> for Requester {
    fn from(has: Option<ReplicaState>) -> Requester {
        Requester {
            has,
            first_keyframe: None,
            reads: Reads::Replica,
        }
    }
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

/// What one [`PullSource::serve`](super::PullSource::serve) did.
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
    /// delta left (see [`crate::refine`]).
    pub refinements: u64,
    /// Resets (first value, length change, encode failure).
    pub resets: u64,
    /// Deltas the codec refused (counted in `resets` too).
    pub encode_failures: u64,
    /// Resets because the replica had drifted more than [`MAX_DRIFT`](super::MAX_DRIFT)
    /// from the value (counted in `resets` too).
    pub drift_resets: u64,
    /// Answers: empty chains.
    pub up_to_date: u64,
    /// Answers: non-empty chains.
    pub chains: u64,
    /// Answers: keyframes.
    pub keyframes: u64,
    /// First values held as a lossy codec's decode, sent as a lossy
    /// keyframe (see [`Requester::first_keyframe`]).
    pub lossy_starts: u64,
    /// Reads answered with the value itself (see [`Reads`]): an exact read
    /// or a read again, in a stateless lossless envelope, and a settling
    /// call that found the replica off the value and brought it there (a
    /// lossless delta, or a reset where f32 cannot add up to it).
    pub settles: u64,
    /// Bytes the values would have cost as f32.
    pub raw_bytes: u64,
    /// Bytes of envelopes sent.
    pub wire_bytes: u64,
}
