//! The `[limits]` table: what a peer, a client or a tensor may make tlcd
//! hold, and for how long.

use serde::{Deserialize, Serialize};

use crate::limits::memory::{self, Origin, Shares, Total};
use tlc_core::{bounds, ConfigError};

/// The `[limits]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// Memory tlcd may use in all, in MiB. Unset: the container's cgroup
    /// limit, or 4096 without one. The default bounds of the context
    /// tables, the fallback cache and calls in flight are shares of it.
    pub memory_mib: Option<u64>,
    /// Largest tensor, in MiB, that a sidecar reads whole or decodes. A
    /// compressed response that declares more falls back to the original.
    pub max_tensor_mib: u64,
    /// Connections each listener serves at once; more are refused.
    pub max_connections: usize,
    /// Seconds a new connection has to open HTTP/2 (its preface) before it
    /// is closed. The upstream is dialled only after the preface.
    pub handshake_seconds: u64,
    /// Seconds an inbound connection (a peer's) may stay without a call in
    /// progress before it is closed gracefully; 0 keeps it forever. The
    /// peer's sidecar reconnects on its next call, unseen by TensorFlow.
    pub idle_seconds: u64,
    /// Seconds a compressed response waits for in-flight memory before it
    /// falls back to its original.
    pub memory_wait_seconds: u64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            memory_mib: None,
            max_tensor_mib: 2048,
            max_connections: 1024,
            handshake_seconds: 10,
            idle_seconds: 3600,
            memory_wait_seconds: 30,
        }
    }
}

/// The bounds in force, in the units the code uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory in all, and whether `limits.memory_mib`, the cgroup or the
    /// fallback set it.
    pub memory: Total,
    /// Shares of it.
    pub shares: Shares,
    /// Largest tensor content read whole or decoded, in bytes.
    pub max_tensor_bytes: u64,
    /// Connections per listener.
    pub max_connections: usize,
    /// Time to the HTTP/2 preface.
    pub handshake: std::time::Duration,
    /// Idle time of inbound connections; `None` for no limit.
    pub idle: Option<std::time::Duration>,
    /// Wait for in-flight memory.
    pub memory_wait: std::time::Duration,
}

impl LimitSettings {
    /// The bounds, or the key of a value out of its range.
    pub fn limits(&self) -> Result<Limits, ConfigError> {
        let memory = match self.memory_mib {
            Some(mib) => {
                bounds::LIMITS_MEMORY_MIB.check("limits.memory_mib", mib)?;
                Total {
                    bytes: mib << 20,
                    origin: Origin::Config,
                }
            }
            None => memory::detected().total(),
        };
        let max_tensor_mib = self.max_tensor_mib;
        bounds::MAX_TENSOR_MIB.check("limits.max_tensor_mib", max_tensor_mib)?;
        let max_connections = u64::try_from(self.max_connections).unwrap_or(u64::MAX);
        bounds::MAX_CONNECTIONS.check("limits.max_connections", max_connections)?;
        let handshake = self.handshake_seconds;
        bounds::HANDSHAKE_SECONDS.check("limits.handshake_seconds", handshake)?;
        let idle = self.idle_seconds;
        bounds::CONNECTION_IDLE_SECONDS.check("limits.idle_seconds", idle)?;
        let wait = self.memory_wait_seconds;
        bounds::MEMORY_WAIT_SECONDS.check("limits.memory_wait_seconds", wait)?;
        let shares = Shares::of(memory.bytes);
        // TensorFlow's limit is 2 GiB. Decoding a pushed tensor holds its
        // envelope, its values and a refinement buffer at once: a third of
        // what calls in flight may hold, or it could never be decoded.
        let max_tensor_bytes = (max_tensor_mib << 20).min(shares.in_flight_bytes / 3);
        Ok(Limits {
            memory,
            shares,
            max_tensor_bytes,
            max_connections: self.max_connections,
            handshake: std::time::Duration::from_secs(handshake),
            idle: (idle > 0).then(|| std::time::Duration::from_secs(idle)),
            memory_wait: std::time::Duration::from_secs(wait),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_their_range_name_the_key() {
        let mut settings = LimitSettings {
            memory_mib: Some(1 << 20),
            ..Default::default()
        };
        assert!(settings.limits().is_ok());
        settings.memory_mib = Some((1 << 20) + 1);
        assert_eq!(
            settings.limits().unwrap_err().to_string(),
            "limits.memory_mib = 1048577: 64 to 1048576 (MiB, 1 TiB)"
        );
        let settings = LimitSettings {
            max_connections: 0,
            ..Default::default()
        };
        assert!(settings
            .limits()
            .unwrap_err()
            .to_string()
            .starts_with("limits.max_connections = 0"));
    }

    #[test]
    fn the_largest_tensor_fits_what_calls_in_flight_may_hold() {
        let small = LimitSettings {
            memory_mib: Some(256),
            ..Default::default()
        };
        let limits = small.limits().unwrap();
        assert_eq!(limits.shares.in_flight_bytes, 64 << 20);
        // The setting takes the place of the cgroup's limit, and says so.
        assert_eq!(
            limits.memory,
            Total {
                bytes: 256 << 20,
                origin: Origin::Config
            }
        );
        assert_eq!(
            LimitSettings::default().limits().unwrap().memory,
            memory::detected().total()
        );
        assert_eq!(limits.max_tensor_bytes, (64 << 20) / 3);
        let large = LimitSettings {
            memory_mib: Some(64 << 10),
            ..Default::default()
        };
        assert_eq!(large.limits().unwrap().max_tensor_bytes, 2048 << 20);
        assert_eq!(
            LimitSettings::default().limits().unwrap().idle,
            Some(std::time::Duration::from_secs(3600))
        );
    }
}
