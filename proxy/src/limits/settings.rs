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
    /// Connections that are not HTTP/2 (forwarded untouched) each listener
    /// serves at once, within `max_connections`; 0 refuses them all. Kept
    /// well below `max_connections` so that they can never take the slots
    /// TensorFlow and peer sidecars need.
    pub max_opaque_connections: usize,
    /// Seconds a connection forwarded untouched may pass no byte either
    /// way before it is closed.
    pub opaque_idle_seconds: u64,
    /// Seconds a closing connection may go without finishing before it
    /// is closed hard: an idle HTTP/2 connection after its GOAWAY, a
    /// forwarded one without a byte moving after either side closed.
    pub close_seconds: u64,
    /// Seconds a new connection may send nothing before it is taken for a
    /// protocol whose server speaks first and forwarded untouched; one
    /// that has still sent nothing at `handshake_seconds` is closed.
    pub server_first_seconds: u64,
    /// Seconds a body read whole (a hop-compressed request, a graph
    /// registration) has to arrive before the call fails.
    pub gather_seconds: u64,
    /// MiB of earlier requests the holder's sidecar keeps for requests
    /// hop-compressed against them (`tlc-hop-ref`), entries counted at
    /// their real size.
    pub hop_references_mib: u64,
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
            max_opaque_connections: 64,
            opaque_idle_seconds: 300,
            close_seconds: 10,
            server_first_seconds: 2,
            gather_seconds: 30,
            hop_references_mib: 8,
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
    /// Opaque (forwarded) connections per listener.
    pub max_opaque_connections: usize,
    /// Idle time of a forwarded connection.
    pub opaque_idle: std::time::Duration,
    /// Time a closing connection has to finish.
    pub close: std::time::Duration,
    /// Silence after which a new connection is taken for server-first.
    pub server_first: std::time::Duration,
    /// Time a body read whole has to arrive.
    pub gather: std::time::Duration,
    /// Bytes of hop references kept.
    pub hop_references_bytes: u64,
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
        let max_opaque = u64::try_from(self.max_opaque_connections).unwrap_or(u64::MAX);
        bounds::MAX_OPAQUE_CONNECTIONS.check("limits.max_opaque_connections", max_opaque)?;
        let opaque_idle = self.opaque_idle_seconds;
        bounds::OPAQUE_IDLE_SECONDS.check("limits.opaque_idle_seconds", opaque_idle)?;
        let close = self.close_seconds;
        bounds::CLOSE_SECONDS.check("limits.close_seconds", close)?;
        let server_first = self.server_first_seconds;
        bounds::SERVER_FIRST_SECONDS.check("limits.server_first_seconds", server_first)?;
        let gather = self.gather_seconds;
        bounds::GATHER_SECONDS.check("limits.gather_seconds", gather)?;
        let references = self.hop_references_mib;
        bounds::HOP_REFERENCES_MIB.check("limits.hop_references_mib", references)?;
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
            max_opaque_connections: self.max_opaque_connections,
            opaque_idle: std::time::Duration::from_secs(opaque_idle),
            close: std::time::Duration::from_secs(close),
            server_first: std::time::Duration::from_secs(server_first),
            gather: std::time::Duration::from_secs(gather),
            hop_references_bytes: references << 20,
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
