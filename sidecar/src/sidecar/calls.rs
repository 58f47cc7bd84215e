//! Per-call instrumentation of `RecvTensor`: one debug span per call with
//! what is known about the tensor, one debug event when it ends, and the
//! call's latency in `tlc_recv_tensor_seconds`.
//!
//! The span is created with every field empty and filled in as the call
//! learns them (the tensor once the request is read, the sizes once the
//! response is), so a call that passes through early still has a span.
//! With debug logging off the span is disabled and costs a level check.

use std::future::Future;
use std::time::Instant;

use http::{Response, StatusCode};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use tlc_core::{Outcome, Role, TensorCall};

use super::stats::Stats;

/// A new span for one `RecvTensor` call through a listener of `role`.
/// Fields: `tensor`, `direction`, `codec`, `raw_bytes` (the tensor as
/// f32), `wire_bytes` (the envelope), recorded when known.
pub fn span(role: Role) -> Span {
    tracing::debug_span!(
        "recv_tensor",
        role = role.name(),
        tensor = Empty,
        direction = Empty,
        class = Empty,
        codec = Empty,
        raw_bytes = Empty,
        wire_bytes = Empty,
    )
}

/// Records which tensor a call is about.
pub fn record_call(span: &Span, call: &TensorCall) {
    span.record("tensor", call.tensor.as_str());
    span.record("direction", call.direction.name());
}

/// Records the sizes of a tensor that crossed compressed, and its codec.
pub fn record_sizes(span: &Span, codec: &'static str, raw_bytes: usize, wire_bytes: usize) {
    span.record("codec", codec);
    span.record("raw_bytes", raw_bytes);
    span.record("wire_bytes", wire_bytes);
}

/// Ends a call: counts its latency since `started` and logs its outcome
/// in its span.
pub fn finish(stats: &Stats, role: Role, span: &Span, outcome: Outcome, started: Instant) {
    let took = started.elapsed();
    stats.recv_tensor(role, outcome, took);
    tracing::debug!(
        parent: span,
        outcome = outcome.name(),
        seconds = took.as_secs_f64(),
        "recv_tensor done"
    );
}

/// The outcome of a response the sidecar did not change: an error if its
/// head says so (an HTTP error, or a trailers-only gRPC error), else
/// passed. An error TensorFlow reports in trailers after a body is not
/// visible here, and counts as passed.
pub fn outcome_of<B>(response: &Response<B>) -> Outcome {
    let grpc_error = response
        .headers()
        .get("grpc-status")
        .is_some_and(|status| status.as_bytes() != b"0");
    if response.status() != StatusCode::OK || grpc_error {
        Outcome::Error
    } else {
        Outcome::Passed
    }
}

/// Runs `respond` for one RecvTensor call on a `role` listener inside the
/// call's span, and counts its latency and outcome when it returns the
/// response head.
pub async fn measured<B, Fut>(
    stats: &Stats,
    role: Role,
    respond: impl FnOnce(Span) -> Fut,
) -> Response<B>
where
    Fut: Future<Output = (Response<B>, Outcome)>,
{
    let started = Instant::now();
    let span = span(role);
    let (response, outcome) = respond(span.clone()).instrument(span.clone()).await;
    finish(stats, role, &span, outcome, started);
    response
}

/// A response the sidecar did not change, with its outcome.
pub fn unchanged<B>(response: Response<B>) -> (Response<B>, Outcome) {
    let outcome = outcome_of(&response);
    (response, outcome)
}

/// A stage of a side's call (the holder's or the requester's `RecvTensor`):
/// what it hands the next stage, or the call's answer. The answer is large
/// for an `Err` (a response head), but it is moved, not copied, once per
/// call that ends early; boxing it would allocate on the path most small
/// tensors take.
#[allow(clippy::result_large_err)]
pub type Stage<T, B> = Result<T, (Response<B>, Outcome)>;

/// The answer a side's stages came to, early or at their end.
pub fn answered<B>(stages: Stage<(Response<B>, Outcome), B>) -> (Response<B>, Outcome) {
    match stages {
        Ok(answer) | Err(answer) => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, grpc_status: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(s) = grpc_status {
            builder = builder.header("grpc-status", s);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn errors_visible_in_the_head_count_as_errors() {
        assert_eq!(outcome_of(&response(200, None)), Outcome::Passed);
        assert_eq!(outcome_of(&response(200, Some("0"))), Outcome::Passed);
        assert_eq!(outcome_of(&response(200, Some("14"))), Outcome::Error);
        assert_eq!(outcome_of(&response(503, None)), Outcome::Error);
    }
}
