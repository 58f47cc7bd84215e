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

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::Xxh3Default;

mod replica;
mod request;
mod source;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_keyframe;

pub use replica::{ApplyError, Replica, ReplicaCounters, ReplicaStore};
pub use request::{KeyframeReason, PullCounters, PullServed, Reads, Requester, Served, Update};
pub use source::{drift, PullSource, ServeError, MAX_DRIFT};

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
