//! The data path of the step watch ([`crate::training`]): a `RecvTensor`
//! call that reads the step counter has its (small) response read whole,
//! its value shown to the watch, and then goes on as the same bytes, or is
//! answered with `FAILED_PRECONDITION` when the watch says the model was
//! re-initialised and the job must fail.
//!
//! Both sides call it: the holder's sidecar for calls from a peer sidecar,
//! the requester's for calls of its local task. Every other call never
//! comes here.

use http::Response;
use tracing::debug;

use tlc_core::TensorCall;
use tlc_proxy::body::{self, Peeked, ProxyBody};
use tlc_proxy::grpc_status;
use tlc_wire::tf::rendezvous::context_name;

use super::counter::{is_step_counter, scalar_value};
use super::{Moment, StepRead, StepWatch, Verdict};

/// Largest response read to find a step counter's value: a scalar's
/// response is under 40 bytes; a larger one is not a counter and streams
/// through unobserved.
pub const MAX_STEP_RESPONSE: usize = 4 << 10;

/// Whether `call` reads a step counter, so its response is to be watched.
pub fn is_step_read(call: &TensorCall) -> bool {
    is_step_counter(context_name(&call.tensor_name))
}

/// What became of a step counter read.
pub enum Watched {
    /// The response to hand on: TensorFlow's bytes, headers and trailers
    /// unchanged (read into memory if the watch looked at them).
    Pass(Response<ProxyBody>),
    /// The error to answer with instead.
    Fail(Response<ProxyBody>),
}

/// Shows the response to a step counter read (`is_step_read(call)`) to
/// the watch, and returns it or the error that replaces it.
pub async fn watch(steps: &StepWatch, call: &TensorCall, response: Response<ProxyBody>) -> Watched {
    // An error from TensorFlow (a trailers-only response) passes as it is.
    if response.status() != http::StatusCode::OK || response.headers().contains_key("grpc-status") {
        return Watched::Pass(response);
    }
    let (parts, response_body) = response.into_parts();
    let collected = match body::peek(response_body, MAX_STEP_RESPONSE).await {
        Ok(Peeked::Whole(collected)) => collected,
        Ok(partial @ Peeked::Partial(..)) => {
            return Watched::Pass(Response::from_parts(parts, partial.into_body()));
        }
        Err(err) => {
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading TensorFlow's response: {err}"),
            );
            return Watched::Fail(response);
        }
    };
    let node = context_name(&call.tensor_name);
    let verdict = match scalar_value(collected.to_bytes(), MAX_STEP_RESPONSE) {
        Some(value) => steps.observe(
            StepRead {
                holder: &call.holder_task,
                incarnation: call.holder_incarnation,
                requester: &call.requester_task,
                node,
            },
            value,
            Moment::now(),
        ),
        None => {
            debug!(
                node,
                "step counter read without an integer scalar: not watched"
            );
            Verdict::Pass
        }
    };
    match verdict {
        Verdict::Pass => {
            let body = body::chunks(collected.chunks, collected.trailers);
            Watched::Pass(Response::from_parts(parts, body))
        }
        Verdict::Fail(message) => Watched::Fail(grpc_status::response(
            grpc_status::FAILED_PRECONDITION,
            &message,
        )),
    }
}
