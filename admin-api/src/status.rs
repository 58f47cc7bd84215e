//! The body of `GET /v1/status`: what one sidecar is, how it is set, and
//! what went through it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::PolicyView;

/// The answer of `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// tlcd's version.
    pub version: String,
    /// tlcd's process id.
    pub pid: u32,
    /// Seconds since the admin API started.
    pub uptime_seconds: f64,
    /// Every listener bound and not draining (what `/readyz` says).
    pub ready: bool,
    /// The config file, `null` without one.
    pub config_file: Option<String>,
    /// The sockets tlcd proxies on.
    pub listeners: Vec<Listener>,
    /// The compression policy in force.
    pub policy: PolicyView,
    /// Running totals since start.
    pub totals: Totals,
    /// What this sidecar saw of the training run's global step.
    pub training: Training,
    /// The tensor contexts held, by kind.
    pub contexts: Contexts,
    /// The log filter in force.
    pub log_filter: String,
    /// `human` or `json`: how log lines look (fixed at start).
    pub log_format: String,
    /// Reloads of the config file.
    pub reloads: Reloads,
    /// The links' rates and the decisions made on them.
    #[serde(default)]
    pub links: Links,
}

/// What a sidecar knows of its links (`[policy.link]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Links {
    /// `auto` (compress where it pays) or `always`.
    pub mode: String,
    /// Requester side: the rate each holder's answers arrive at, where
    /// known.
    pub rates: Vec<LinkRate>,
    /// Holder side: times a tensor switched to crossing raw.
    pub switched_to_raw: u64,
    /// Holder side: times a tensor switched back to compressed.
    pub switched_to_compressed: u64,
    /// Holder side: calls sent exactly through a tensor's memory after or
    /// before raw ones (a push's pending error, a pull's replica).
    #[serde(default)]
    pub settled: u64,
}

/// The measured rate of one link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRate {
    /// The holder task.
    pub peer: String,
    /// Bytes per second.
    pub bytes_per_second: f64,
}

/// One listening socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// The address it accepts on, `HOST:PORT`.
    pub listen: String,
    /// The side of the tensors' path it serves.
    pub role: Role,
    /// Where it forwards: `HOST:PORT`, or `original-destination` for a
    /// transparent listener.
    pub target: String,
}

/// Which side of a tensor's path a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Next to the task that asks for tensors: it decodes.
    Outbound,
    /// Next to the task that holds tensors: it encodes.
    Inbound,
}

/// The sidecar's running totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Gradients workers sent.
    pub push: DirectionTotals,
    /// Values workers fetched.
    pub pull: DirectionTotals,
    /// Decoding side: envelopes turned back into tensors.
    pub restored: u64,
    /// Decoding side: envelopes that could not be used.
    pub decode_failures: u64,
    /// Decoding side: original responses fetched after a failure.
    pub fallbacks: u64,
    /// Encoding side: such fallback requests answered.
    pub fallbacks_served: u64,
    /// Tensors passed as TensorFlow sent them, by reason (`small`, ...).
    pub passed: BTreeMap<String, u64>,
    /// Embedding and gradient rows sent by row id (encoding side).
    #[serde(default)]
    pub rows: RowTotals,
    /// Messages that are not envelopes, compressed losslessly between
    /// sidecars.
    #[serde(default)]
    pub hop: HopTotals,
    /// Sessions with peers' sidecars (a connection's calls as frames of
    /// one stream), this process's.
    #[serde(default)]
    pub sessions: SessionTotals,
}

/// Sessions with peers' sidecars.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTotals {
    /// Opened to a peer's sidecar.
    pub opened: u64,
    /// Not taken by the peer (no sidecar, an older one, no answer in time):
    /// a stream per call on that connection.
    pub refused: u64,
    /// Opened by a peer's sidecar to this one.
    pub served: u64,
    /// Ended on a broken rule or stream; their calls in progress failed.
    pub broken: u64,
    /// Calls carried in a session.
    pub calls: u64,
    /// Calls sent on a stream of their own while a session was open.
    pub calls_on_streams: u64,
}

/// Rows sent by row id (encoding side).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowTotals {
    /// Distinct rows the requester held: sent as deltas.
    pub hits: u64,
    /// Distinct rows sent whole (new to the requester), and pushed rows.
    pub new: u64,
    /// Rows dropped from mirrors and error buffers by their bound.
    pub evictions: u64,
    /// Row-keyed tensors sent without memory because their ids were not
    /// seen.
    pub without_ids: u64,
}

/// Lossless compression between sidecars, both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopTotals {
    /// Bytes of the messages this sidecar compressed, before.
    pub sent_raw_bytes: u64,
    /// The same, after.
    pub sent_wire_bytes: u64,
    /// Bytes of the compressed messages this sidecar restored, as they came.
    pub received_wire_bytes: u64,
    /// The same, restored.
    pub received_raw_bytes: u64,
    /// Compressed messages that could not be restored.
    pub failures: u64,
    /// Bytes of messages sent as they came: compressing did not make them
    /// smaller (float values of small tensors, mostly).
    #[serde(default)]
    pub unshrunk_bytes: u64,
}

/// Totals of one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionTotals {
    /// Tensors compressed.
    pub tensors: u64,
    /// Their size as f32.
    pub raw_bytes: u64,
    /// Their size on the wire.
    pub wire_bytes: u64,
    /// `raw_bytes / wire_bytes`, 0 before the first.
    pub ratio: f64,
}

/// What this sidecar saw of the reads of the global step that crossed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Training {
    /// The value as last read (the highest since it last went back);
    /// `null` before any read.
    pub global_step: Option<i64>,
    /// Seconds since it last advanced; `null` until it did.
    pub seconds_since_advanced: Option<f64>,
    /// When it last advanced, seconds since the Unix epoch; `null` until
    /// it did.
    pub advanced_unix_time: Option<f64>,
    /// Resets seen (the step back to its lowest value), whatever was done.
    pub resets: u64,
    /// Resets answered by failing the job.
    pub resets_failed: u64,
    /// Resets let through.
    pub resets_warned: u64,
    /// Rewinds seen (the step back to a later point: a checkpoint restore).
    pub rewinds: u64,
    /// The last reset, `null` before one.
    pub last_reset: Option<StepEvent>,
    /// The last rewind, `null` before one.
    pub last_rewind: Option<StepEvent>,
    /// `recovery.on_model_reset` in force: `fail` or `warn`.
    pub on_model_reset: String,
    /// Jobs failed because their calls were stuck after a rebuilt
    /// session (`recovery.stall_fail_seconds`).
    #[serde(default)]
    pub stalls_failed: u64,
}

/// A step counter that went back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEvent {
    /// The task holding the counter.
    pub holder: String,
    /// The counter (`global_step`).
    pub counter: String,
    /// The value read before.
    pub from: i64,
    /// The value read then.
    pub to: i64,
    /// When, in seconds since the Unix epoch.
    pub unix_time: f64,
    /// For a reset only: `failed` (the job was failed) or `warned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// The tensor contexts held, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contexts {
    /// Push contexts, with their error buffers.
    pub push: TableSize,
    /// Pull sources.
    pub pull: TableSize,
    /// Replicas of pulled values (requester side).
    pub replicas: TableSize,
    /// Row mirrors and row error buffers, both sides.
    #[serde(default)]
    pub rows: TableSize,
}

/// The size of one table of contexts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSize {
    /// How many contexts.
    pub contexts: u64,
    /// The memory they hold, as last measured.
    pub memory_bytes: u64,
}

/// Reloads of the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloads {
    /// Reloads that took effect.
    pub ok: u64,
    /// Reloads refused.
    pub failed: u64,
    /// Why the last refused reload was refused; `null` before one.
    pub last_error: Option<String>,
    /// Keys changed in the file that wait for a restart.
    pub pending_restart: Vec<String>,
    /// Keys the last reload changed in the file whose value a higher layer
    /// sets (`policy.push.codec (env TLC_POLICY__PUSH__CODEC)`): the change
    /// has no effect.
    #[serde(default)]
    pub overridden: Vec<String>,
}
