//! The `[limits]` table: what a peer, a client or a tensor may make tlcd
//! hold, and for how long.

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::limits::memory::{self, Shares};

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
    /// Memory in all, in bytes.
    pub memory_bytes: u64,
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

/// Bounds every `[limits]` value must stay within.
const MEMORY_MIB: (u64, u64) = (64, 1 << 20);
const MAX_TENSOR_MIB: (u64, u64) = (1, 2048);
const MAX_CONNECTIONS: (u64, u64) = (1, 65_536);
const HANDSHAKE_SECONDS: (u64, u64) = (1, 300);
const IDLE_SECONDS: (u64, u64) = (0, 7 * 24 * 3600);
const MEMORY_WAIT_SECONDS: (u64, u64) = (1, 600);

impl LimitSettings {
    /// The bounds, or the key of a value out of its range.
    pub fn limits(&self) -> Result<Limits, ConfigError> {
        let memory_bytes = match self.memory_mib {
            Some(mib) => in_range("memory_mib", mib, MEMORY_MIB)? << 20,
            None => memory::detected().bytes,
        };
        let max_tensor_mib = in_range("max_tensor_mib", self.max_tensor_mib, MAX_TENSOR_MIB)?;
        let max_connections = in_range(
            "max_connections",
            self.max_connections as u64,
            MAX_CONNECTIONS,
        )?;
        let handshake = in_range(
            "handshake_seconds",
            self.handshake_seconds,
            HANDSHAKE_SECONDS,
        )?;
        let idle = in_range("idle_seconds", self.idle_seconds, IDLE_SECONDS)?;
        let wait = in_range(
            "memory_wait_seconds",
            self.memory_wait_seconds,
            MEMORY_WAIT_SECONDS,
        )?;
        let shares = Shares::of(memory_bytes);
        // TensorFlow's limit is 2 GiB. Decoding a pushed tensor holds its
        // envelope, its values and a refinement buffer at once: a third of
        // what calls in flight may hold, or it could never be decoded.
        let max_tensor_bytes = (max_tensor_mib << 20).min(shares.in_flight_bytes / 3);
        Ok(Limits {
            memory_bytes,
            shares,
            max_tensor_bytes,
            max_connections: max_connections as usize,
            handshake: std::time::Duration::from_secs(handshake),
            idle: (idle > 0).then(|| std::time::Duration::from_secs(idle)),
            memory_wait: std::time::Duration::from_secs(wait),
        })
    }
}

fn in_range(key: &str, value: u64, (low, high): (u64, u64)) -> Result<u64, ConfigError> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            key: format!("limits.{key}"),
            value: value.to_string(),
            allowed: format!("from {low} to {high}"),
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
            "limits.memory_mib = 1048577: from 64 to 1048576"
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
