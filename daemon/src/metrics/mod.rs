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
//! Every family, its labels and what it means: the table in
//! `docs/OPERATING.md`, "Metrics" (the one copy; `tests/metrics.rs`
//! fails on a family rendered here that it lacks).
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

use std::hash::Hash;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

/// A counter standing at `n`: each scrape builds its series afresh from
/// the totals the sidecar keeps, so the count is set, never counted up.
fn counter_at(n: u64) -> Counter {
    let counter = Counter::default();
    counter.inc_by(n);
    counter
}

/// A counter family with one series per `(labels, n)`, each standing at
/// its `n` (see [`counter_at`]).
fn counters_by<L>(series: impl IntoIterator<Item = (L, u64)>) -> Family<L, Counter>
where
    L: Clone + Eq + Hash,
{
    let family = Family::<L, Counter>::default();
    for (labels, n) in series {
        family.get_or_create(&labels).inc_by(n);
    }
    family
}
