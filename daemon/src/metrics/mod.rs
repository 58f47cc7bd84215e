//! Prometheus metrics of a sidecar, as OpenMetrics text on `GET /metrics`
//! (`[metrics] listen`, default `0.0.0.0:17090`), and the per-call
//! tracing of `RecvTensor`.
//!
//! - [`tlc_sidecar::counters`]: the labelled counters and histograms the
//!   data path updates (kept in the sidecar's
//!   [`Stats`](tlc_sidecar::sidecar::stats::Stats));
//! - [`collect`]: what a scrape reads from the sidecar's state;
//! - [`tlc_sidecar::sidecar::calls`]: the span, outcome and latency of each
//!   `RecvTensor` call;
//! - [`held`]: connections and in-flight memory against `[limits]`, and
//!   the memory total those limits come from;
//! - [`training`]: training progress and models that went back;
//! - [`links`]: each link's measured rate, and the tensors that switched
//!   between raw and compressed on it;
//! - [`checks`]: what the operator's checks (`[policy.check]`) found;
//! - [`process`]: the process' CPU, memory, threads and descriptors;
//! - [`http`]: the endpoint.
//!
//! Every name starts with `tlc_`, except the [`process`] series, which
//! carry Prometheus' standard `process_*` names. "Encoding side" is the sidecar next to
//! the task that holds a tensor (it compresses, listener role `inbound`);
//! "decoding side" the one next to the task that asks for it (`outbound`).
//! Label values are fixed by tlcd (directions, codec names, reasons),
//! except `tensor` in the two `tlc_tensor_top_*` families, which hold
//! [`collect::TOP_TENSORS`] tensors at most, and `peer` in
//! `tlc_link_rate_bytes_per_second`: the job's tasks this sidecar asked
//! tensors of (4096 at most).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `tlc_tensor_raw_bytes_total` | counter | `direction`, `codec` | encoding side: size as f32 of the tensors sent compressed |
//! | `tlc_tensor_wire_bytes_total` | counter | `direction`, `codec` | encoding side: size of the envelopes sent in their place |
//! | `tlc_frames_total` | counter | `direction`, `codec` | encoding side: tensors sent compressed (one envelope each) |
//! | `tlc_encode_seconds` | histogram | `direction`, `codec` | encoding side: codec work per tensor, under the context's lock (push: error feedback and codec; pull: replica update, delta encode and the envelope) |
//! | `tlc_decode_seconds` | histogram | `direction`, `codec` | decoding side: envelope to tensor content (push: decode; pull: apply to the replica and copy out) |
//! | `tlc_restored_total` | counter | `direction` | decoding side: compressed responses restored for TensorFlow |
//! | `tlc_decode_failures_total` | counter | `direction` | decoding side: envelopes that could not be used |
//! | `tlc_ids_again_bytes_total` | counter | `stage` = `raw`, `wire` | encoding side: id tensors equal to ids of the same step the requester holds, sent as a reference to them (raw: their bytes; wire: the reference's) |
//! | `tlc_fallbacks_total` | counter | `side` = `fetched`, `served`, `released` | original responses fetched after a decode failure / sent to a peer that asked / dropped once the peer acknowledged their envelope |
//! | `tlc_fallback_kept_bytes` | gauge | | encoding side: original responses kept for fallbacks now |
//! | `tlc_passthrough_total` | counter | `reason` | responses left uncompressed (`small`, `policy_skip`, `request_unreadable`, `not_float`, `codec_refused`, `link_fast`: the link is faster than compressing, `link_explore`: sent raw so the requester can time its link, ...) |
//! | `tlc_link_rate_bytes_per_second` | gauge | `peer` | decoding side: the rate each holder task's answers arrive at, where measured |
//! | `tlc_mirror_checks_total` | counter | `result` = `match`, `mismatch` | decoding side, with `[policy.check] mirror`: restored tensors checked against the holder's hash; a mismatch handed TensorFlow the original |
//! | `tlc_forced_exact_calls_total` | counter | | encoding side: calls sent exactly because `[policy.check] exact_at_call` named them |
//! | `tlc_link_switches_total` | counter | `to` = `raw`, `compressed` | encoding side: times a tensor switched to crossing raw (its link faster than compressing it) or back |
//! | `tlc_keyframes_total` | counter | `side` = `holder`, `requester` | pull keyframes (whole replicas) served / applied |
//! | `tlc_recv_tensor_seconds` | histogram | `role` = `inbound`, `outbound`; `outcome` = `compressed`, `restored`, `passed`, `fallback`, `error` | latency of a `RecvTensor` call through the sidecar |
//! | `tlc_config_reloads_total` | counter | `result` = `ok`, `error` | configuration reloads applied / refused |
//! | `tlc_sparsity` | gauge | `direction` | 3LC's `s` of the direction's codec (before overrides); absent when that codec is not `3lc` |
//! | `tlc_policy_codec_info` | info | `direction`, `codec` | the direction's codec before overrides |
//! | `tlc_contexts` | gauge | `table` = `push`, `pull`, `replica` | contexts held |
//! | `tlc_context_memory_bytes` | gauge | `table` | their memory, as last measured |
//! | `tlc_replica_version_max` | gauge | `side` = `holder`, `requester` | highest replica version among pull sources / replicas; absent while there is none |
//! | `tlc_tensor_top_raw_bytes_total` | counter | `direction`, `tensor` | encoding side, per tensor, for the 20 tensors with the most raw bytes |
//! | `tlc_tensor_top_wire_bytes_total` | counter | `direction`, `tensor` | the same tensors' envelope bytes |
//! | `tlc_connections_open` | gauge | | connections being served, every listener |
//! | `tlc_connections_refused_total` | counter | `reason` = `limit`, `handshake`, `tls`, `upstream_unreachable` | connections closed before being served |
//! | `tlc_connections_opaque_total` | counter | | connections that did not speak HTTP/2, forwarded untouched |
//! | `tlc_connections_idle_closed_total` | counter | | peer connections closed after `limits.idle_seconds` without a call |
//! | `tlc_in_flight_bytes` | gauge | | memory calls in flight hold now (the in-flight budget's use) |
//! | `tlc_in_flight_budget_bytes` | gauge | | what they may hold at most |
//! | `tlc_memory_limit_bytes` | gauge | `source` = `config`, `cgroup`, `fallback` | the memory tlcd may use in all, which its default bounds are shares of: `limits.memory_mib`, else the container's cgroup limit, else 4 GiB; one series |
//! | `tlc_tls_cert_not_after_seconds` | gauge | | with `[tls]` on: when this sidecar's certificate expires (Unix time) |
//! | `tlc_tls_reloads_total` | counter | `result` = `ok`, `error` | with `[tls]` on: changed certificate files taken / refused |
//! | `tlc_training_global_step` | gauge | | the global step as last read through this sidecar (the highest since it last went back); absent before any read |
//! | `tlc_training_global_step_advanced_timestamp_seconds` | gauge | | when it last advanced (Unix time); absent until it does |
//! | `tlc_training_resets_total` | counter | `action` = `failed`, `warned` | the global step went back to the model's start mid-run (TensorFlow re-initialised the variables); `failed`: the job was failed (`recovery.on_model_reset`) |
//! | `tlc_training_rewinds_total` | counter | | the global step went back to a point after the start (a checkpoint restore) |
//! | `tlc_build_info` | info | `version` | 1 |
//! | `process_cpu_seconds_total` | counter | | user and system CPU time of tlcd |
//! | `process_resident_memory_bytes` | gauge | | its resident memory |
//! | `process_virtual_memory_bytes` | gauge | | its virtual memory |
//! | `process_open_fds` | gauge | | file descriptors open |
//! | `process_max_fds` | gauge | | the soft limit on them (`RLIMIT_NOFILE`); absent when unlimited |
//! | `process_start_time_seconds` | gauge | | when tlcd started (Unix time) |
//! | `process_threads` | gauge | | its OS threads |
//!
//! `codec` on the encoding side is the codec the policy chose for the
//! tensor; pull keyframes (sent losslessly) count under it too, so the
//! bytes say what running that codec costs. On the decoding side it is the
//! codec of the envelope's first frame: `none` for keyframes and for
//! empty chains (the replica was up to date).
//!
//! `tlc_recv_tensor_seconds` runs from the moment the proxy hands the call
//! to the sidecar (request head read) to the moment the response head is
//! ready to go back: reading the request body, the call upstream, and when
//! a response is compressed or restored, reading all of it and the codec
//! work. Responses streamed through unchanged stop the clock at their
//! head, so `passed` measures time to first byte. `error` is an error
//! tlcd answered with or one visible in the response head; an error
//! TensorFlow sends in trailers after a streamed body counts as `passed`.
//!
//! The per-tensor counters sum a tensor's live contexts (one per task a
//! gradient goes to): they restart from 0 when a context is evicted and
//! made again, which Prometheus reads as a counter reset.

pub mod checks;
pub mod collect;
pub mod held;
pub mod http;
pub mod links;
pub mod process;
pub mod training;

pub use http::{handle, handler, serve, CONTENT_TYPE, PATH};

use tlc_sidecar::sidecar::Sidecar;

/// The OpenMetrics text of `sidecar` now, ending in `# EOF`.
pub fn render(sidecar: &Sidecar) -> Result<String, std::fmt::Error> {
    use prometheus_client::encoding::text::{encode_eof, encode_registry};
    let registry = collect::registry(sidecar);
    // Its own registry: the other one puts `tlc_` before every name.
    let mut standard = prometheus_client::registry::Registry::default();
    process::register(&mut standard);
    let mut text = String::with_capacity(16 * 1024);
    encode_registry(&mut text, &registry)?;
    encode_registry(&mut text, &standard)?;
    encode_eof(&mut text)?;
    Ok(text)
}
