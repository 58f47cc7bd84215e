//! The allowed range of every whole number in the configuration, in one
//! place. Each is far above anything a real job needs: the bounds are there
//! so that a typo or a hostile request (the admin API, an environment
//! variable) cannot ask for a terabyte-sized cache or an hour-long step,
//! not to tune anything. The fractional values (sparsity, `k`, the
//! refinement targets) are checked where they are parsed, by the codec and
//! the sidecar's policy; a TernGrad `seed` is any 64-bit value.
//!
//! | key | range |
//! |---|---|
//! | `drain_seconds` | 0 to 3600 |
//! | `contexts.memory_mib` | 1 to 1048576 (1 TiB) |
//! | `contexts.idle_seconds` | 1 to 604800 (7 days) |
//! | `contexts.pull_cache` | 1 to 4096 |
//! | `contexts.fallback_mib` | 1 to 1048576 (1 TiB) |
//! | `limits.memory_mib` | 64 to 1048576 (1 TiB) |
//! | `limits.max_tensor_mib` | 1 to 2048 (TensorFlow's largest message) |
//! | `limits.max_connections` | 1 to 65536 |
//! | `limits.handshake_seconds` | 1 to 300 |
//! | `limits.idle_seconds` | 0 (never) to 604800 (7 days) |
//! | `limits.memory_wait_seconds` | 1 to 600 |
//! | `limits.max_opaque_connections` | 0 (none) to 65536 |
//! | `limits.opaque_idle_seconds` | 1 to 604800 (7 days) |
//! | `limits.close_seconds` | 1 to 600 |
//! | `limits.server_first_seconds` | 1 to 300 |
//! | `limits.gather_seconds` | 1 to 3600 |
//! | `limits.hop_references_mib` | 1 to 1024 |
//! | `policy.min_bytes`, `policy.min_vector_bytes`, `policy.min_row_bytes` | 0 to 2147483648 (2 GiB, TensorFlow's largest message) |
//! | `policy.warmup_steps` | 0 to 1000000 |
//! | `policy.overrides` | at most 1024 entries |
//! | `policy.refine.*_max_passes` | 1 to 16 (pull), 1 to 8 (push) |
//! | `policy.link.margin` | 1 to 100 |
//! | `policy.link.assume_rate_mbit` | 0 (measure) to 10000000 (10 Tbit/s) |
//! | `recovery.stall_warn_seconds` | 0 (never) to 604800 (7 days) |
//! | `recovery.stall_fail_seconds` | 0 (never) to 604800 (7 days) |

use crate::ConfigError;

/// A closed range of whole numbers, and what its unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value.
    pub max: u64,
    /// Said after the range in errors: the unit, and what `max` is in
    /// words when the number alone does not say it.
    pub note: &'static str,
}

impl Range {
    /// `min` to `max`, in the unit `note` says.
    pub const fn new(min: u64, max: u64, note: &'static str) -> Range {
        Range { min, max, note }
    }

    /// `Ok` if `value` is in the range, else the error naming `key`.
    pub fn check(&self, key: &str, value: u64) -> Result<(), ConfigError> {
        if (self.min..=self.max).contains(&value) {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: key.into(),
            value: value.to_string(),
            allowed: self.describe(),
        })
    }

    /// `1 to 1048576 (MiB, 1 TiB)`.
    pub fn describe(&self) -> String {
        if self.note.is_empty() {
            format!("{} to {}", self.min, self.max)
        } else {
            format!("{} to {} ({})", self.min, self.max, self.note)
        }
    }
}

/// `drain_seconds`: in-flight calls get at most an hour on shutdown.
pub const DRAIN_SECONDS: Range = Range::new(0, 3600, "seconds");

/// `contexts.memory_mib`, per table.
pub const MEMORY_MIB: Range = Range::new(1, 1 << 20, "MiB, 1 TiB");

/// `contexts.idle_seconds`.
pub const IDLE_SECONDS: Range = Range::new(1, 7 * 24 * 3600, "seconds, 7 days");

/// `contexts.pull_cache`: deltas kept per pulled tensor, about one per
/// worker of an asynchronous job.
pub const PULL_CACHE: Range = Range::new(1, 4096, "deltas");

/// `contexts.fallback_mib`.
pub const FALLBACK_MIB: Range = Range::new(1, 1 << 20, "MiB, 1 TiB");

/// `limits.memory_mib`: below 64 MiB a sidecar cannot hold one ordinary
/// tensor per table.
pub const LIMITS_MEMORY_MIB: Range = Range::new(64, 1 << 20, "MiB, 1 TiB");

/// `limits.max_tensor_mib`.
pub const MAX_TENSOR_MIB: Range = Range::new(1, 2048, "MiB, TensorFlow's largest message");

/// `limits.max_connections`, per listener.
pub const MAX_CONNECTIONS: Range = Range::new(1, 65_536, "connections");

/// `limits.handshake_seconds`.
pub const HANDSHAKE_SECONDS: Range = Range::new(1, 300, "seconds");

/// `limits.idle_seconds`; 0 keeps idle connections forever.
pub const CONNECTION_IDLE_SECONDS: Range =
    Range::new(0, 7 * 24 * 3600, "seconds, 7 days; 0: never");

/// `limits.memory_wait_seconds`.
pub const MEMORY_WAIT_SECONDS: Range = Range::new(1, 600, "seconds");

/// `limits.max_opaque_connections`, per listener; 0 refuses them all.
pub const MAX_OPAQUE_CONNECTIONS: Range = Range::new(0, 65_536, "connections; 0: none");

/// `limits.opaque_idle_seconds`.
pub const OPAQUE_IDLE_SECONDS: Range = Range::new(1, 7 * 24 * 3600, "seconds, 7 days");

/// `limits.close_seconds`.
pub const CLOSE_SECONDS: Range = Range::new(1, 600, "seconds");

/// `limits.server_first_seconds`.
pub const SERVER_FIRST_SECONDS: Range = Range::new(1, 300, "seconds");

/// `limits.gather_seconds`.
pub const GATHER_SECONDS: Range = Range::new(1, 3600, "seconds");

/// `limits.hop_references_mib`.
pub const HOP_REFERENCES_MIB: Range = Range::new(1, 1024, "MiB");

/// `policy.min_bytes`: a tensor is at most a 2 GiB message, so a larger
/// threshold could only mean "never compress" (say `codec = "none"`).
pub const MIN_BYTES: Range = Range::new(0, 2 << 30, "bytes, 2 GiB");

/// `policy.link.margin`.
pub const LINK_MARGIN: Range = Range::new(1, 100, "times the break-even rate");

/// `policy.link.assume_rate_mbit`.
pub const ASSUME_RATE_MBIT: Range = Range::new(0, 10_000_000, "Mbit/s, 0 = measure");

/// `policy.warmup_steps`.
pub const WARMUP_STEPS: Range = Range::new(0, 1_000_000, "steps");

/// `policy.overrides`: every tensor is matched against each in turn.
pub const OVERRIDES: Range = Range::new(0, 1024, "entries");

/// `recovery.stall_warn_seconds` and `stall_fail_seconds`; 0 turns each off.
pub const STALL_WARN_SECONDS: Range = Range::new(0, 7 * 24 * 3600, "seconds, 7 days; 0: never");
