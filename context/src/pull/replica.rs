//! The requester side of pulls: a [`Replica`] per (holder, tensor), kept in
//! a [`ReplicaStore`], that applies what the holder sends.

use std::time::Instant;

use thiserror::Error;
use tlc_codec::{DecodeError, Limits, Params};

use super::{add_delta, replica_hash, ReplicaState};
use crate::table::{lock, ContextMemory, ContextTable, TableLimits};
use tlc_core::TensorKey;
use tlc_wire::envelope::{Envelope, EnvelopeError, Kind};

/// Why an envelope could not be applied to a replica. The variants say
/// whether the replica survived: all but [`ApplyError::Dropped`] leave it
/// as it was.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ApplyError {
    /// The envelope is malformed (checked before anything changes).
    #[error("bad pull envelope: {0}")]
    Envelope(#[from] EnvelopeError),
    /// A well-formed push envelope (or a rows envelope, which
    /// [`crate::rows`] applies) where a chain or keyframe was expected.
    #[error("expected a pull envelope (chain or keyframe), got a push or rows envelope")]
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
            Kind::Push | Kind::RowsPull | Kind::RowsPush => Err(ApplyError::NotAPull),
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
    table: ContextTable<TensorKey, Replica>,
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
    pub fn state(&self, key: &TensorKey, now: Instant) -> Option<ReplicaState> {
        self.table.get(key, now).and_then(|r| lock(&r).state())
    }

    /// Applies an envelope to `key`'s replica (made empty if there is none)
    /// and passes the resulting values to `take` while the replica is
    /// locked, typically to copy them into the response for TensorFlow.
    pub fn apply<T>(
        &self,
        key: &TensorKey,
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
    pub fn replica_hash(&self, key: &TensorKey, now: Instant) -> Option<u64> {
        self.table
            .get(key, now)
            .and_then(|r| lock(&r).replica_hash())
    }

    /// The table, for eviction, stats and listings.
    pub fn table(&self) -> &ContextTable<TensorKey, Replica> {
        &self.table
    }
}
