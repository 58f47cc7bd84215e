//! One call through the sidecar, from the listener to the listener: the
//! order in which every call is handled, written once, and the state its
//! stages hand each other.
//!
//! In order:
//!
//! 1. **untrusted headers**: a caller not authenticated where peers must
//!    use TLS loses whatever it claims in `tlc-*` headers (and may not ask
//!    for a fallback); what TensorFlow sends (outbound) loses them too,
//!    before the sidecar adds its own ([`boundary`]);
//! 2. **hop restore** (inbound): a peer sidecar's hop-compressed request
//!    restored ([`crate::hop`]);
//! 3. **session and step watch**: a new session after training advanced is
//!    said; a call still waiting when the job is found stuck after a
//!    rebuilt session is failed;
//! 4. **fallback route** (inbound): a peer asking for an original is
//!    answered from the fallback cache;
//! 5. **graph tap**: graph registrations read on their way;
//! 6. anything but `RecvTensor` forwarded as it is;
//! 7. **recorder** (outbound, when recording): the call recorded instead;
//! 8. **holder or requester side**: [`holder`] or [`requester`], inside
//!    the call's span and latency measure ([`calls::measured`]);
//! 9. **hop compress** (inbound, to a peer sidecar): the answer's messages
//!    compressed unless the holder side said to leave them; outbound, every
//!    sidecar header stripped before TensorFlow sees the answer;
//! 10. **memory charge** (inbound): what streams to a peer is charged to
//!     the in-flight budget until written, unless the holder side charged
//!     it already: a peer may not read what it asked for.
//!
//! A new capability is a field of [`CallState`] and a stage here or in a
//! side's own list, not a marker put on a response for a later stage to
//! find.

// A stage that answers early returns the answer as its `Err`: large, but
// moved once per call that ends there.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};

use super::boundary;
use super::call_state::CallState;
use super::{calls, holder, record, requester, Sidecar, CREATE_WORKER_SESSION, RECV_TENSOR};
use crate::graph::tap::Registration;
use tlc_core::Role;
use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;
use tlc_proxy::Unauthenticated;
use tlc_wire::peer;

/// Handles one call arriving on a listener of `role`: the stages of this
/// module, in order.
pub(super) async fn handle(
    sidecar: Arc<Sidecar>,
    role: Role,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let mut state = CallState::new(role);
    let request = match untrusted_stripped(role, request) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let request = match hop_restored(&sidecar, &mut state, request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let response = watched(Arc::clone(&sidecar), &mut state, upstream, request).await;
    let response = hop_compressed(&sidecar, &state, response);
    memory_charged(&sidecar, &state, response)
}

/// Stage 1: no `tlc-*` header a caller may not vouch for goes further.
fn untrusted_stripped(
    role: Role,
    mut request: Request<ProxyBody>,
) -> Result<Request<ProxyBody>, Response<ProxyBody>> {
    if request.extensions().get::<Unauthenticated>().is_some() {
        if request.uri().path() == peer::FALLBACK_PATH {
            return Err(grpc_status::response(
                grpc_status::PERMISSION_DENIED,
                "tlcd: fallbacks are served to peers authenticated by TLS only",
            ));
        }
        peer::strip(request.headers_mut());
    }
    if role == Role::Outbound {
        // From TensorFlow: it says nothing in sidecar headers.
        request = boundary::stripped(request);
    }
    Ok(request)
}

/// Stage 2: a peer sidecar's hop-compressed request restored (inbound).
async fn hop_restored(
    sidecar: &Sidecar,
    state: &mut CallState,
    request: Request<ProxyBody>,
) -> Result<Request<ProxyBody>, Response<ProxyBody>> {
    if state.role != Role::Inbound {
        return Ok(request);
    }
    let (request, hop_peer) =
        crate::hop::restore_request(&sidecar.hop, sidecar.stats.hop(), request).await?;
    state.hop_peer = hop_peer;
    Ok(request)
}

/// Stage 3: the session and step watch around the rest of the call.
///
/// A call still waiting for its answer when the job is found stuck after
/// a rebuilt session ([`StepWatch::stuck_after_rebuild`]) is answered with
/// `FAILED_PRECONDITION` instead, which ends the job.
///
/// [`StepWatch::stuck_after_rebuild`]: crate::training::StepWatch::stuck_after_rebuild
async fn watched(
    sidecar: Arc<Sidecar>,
    state: &mut CallState,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    if request.uri().path() == CREATE_WORKER_SESSION {
        if let Some(step) = sidecar.steps.session_created(Instant::now()) {
            tracing::warn!(
                global_step = step,
                "TensorFlow made a new session after training had advanced (a session rebuilt \
                 after a failure, or a script's extra session)"
            );
        }
    }
    let mut stuck = sidecar.stuck.subscribe();
    stuck.mark_unchanged();
    let _waiting = Waiting::begin(&sidecar.waiting);
    tokio::select! {
        response = routed(Arc::clone(&sidecar), state, upstream, request) => response,
        Ok(()) = stuck.changed() => {
            let message = stuck.borrow().clone().unwrap_or_default();
            grpc_status::response(grpc_status::FAILED_PRECONDITION, &message)
        }
    }
}

/// Stages 4–8: the call routed by its path: a fallback, a graph
/// registration read on its way, anything but `RecvTensor` forwarded, a
/// recorded call, or the holder's or the requester's side.
async fn routed(
    sidecar: Arc<Sidecar>,
    state: &mut CallState,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let role = state.role;
    let path = request.uri().path();
    if role == Role::Inbound && path == peer::FALLBACK_PATH {
        sidecar.stats.fallback_served();
        return sidecar.holder.fallbacks.serve(&request);
    }
    let request = match Registration::of_path(path) {
        // Read the graph on its way; the call goes on untouched.
        Some(registration) => Sidecar::tap(&sidecar, registration, request),
        None => request,
    };
    // Each branch's future is boxed: they are kilobytes each, and held
    // inline they would make every future above this one as large, to be
    // copied again at each level on every call (`boxed_branches` test).
    if request.uri().path() != RECV_TENSOR {
        return Box::pin(sidecar.forward(role, upstream, request)).await;
    }
    if let Some(recorder) = sidecar.recorder.as_ref().filter(|_| role == Role::Outbound) {
        if let Some(n) = recorder.claim() {
            return Box::pin(record::record_call(recorder, n, upstream, request)).await;
        }
    }
    let sidecar = &*sidecar;
    calls::measured(&sidecar.stats, role, |span| async move {
        match role {
            Role::Inbound => {
                Box::pin(holder::recv_tensor(
                    sidecar, upstream, request, &span, state,
                ))
                .await
            }
            Role::Outbound => {
                Box::pin(requester::recv_tensor(sidecar, upstream, request, &span)).await
            }
        }
    })
    .await
}

/// Stage 9: the answer to a peer sidecar marked, and its messages
/// compressed unless the holder side leaves them as they are; to
/// TensorFlow, every sidecar header read by now is stripped.
fn hop_compressed(
    sidecar: &Sidecar,
    state: &CallState,
    response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    if state.hop_peer {
        let compress = sidecar.policy().hop_compression() && !state.leave_as_is;
        crate::hop::compress_response(response, sidecar.stats.hop(), compress)
    } else if state.role == Role::Outbound {
        boundary::stripped_response(response)
    } else {
        response
    }
}

/// Stage 10: what streams to a peer charged to the in-flight budget until
/// written, unless the holder side charged it already.
fn memory_charged(
    sidecar: &Sidecar,
    state: &CallState,
    response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    if state.role == Role::Inbound && !state.charged {
        response.map(|b| body::charged(b, &sidecar.budget))
    } else {
        response
    }
}

/// One call waiting for its response head, counted while it lives.
struct Waiting<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Waiting<'a> {
    fn begin(count: &'a std::sync::atomic::AtomicU64) -> Waiting<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::sidecar::Options;

    /// A call's future is built, moved into its task and polled through
    /// every stage; boxed branches keep it to what the stages above them
    /// hold, not the kilobytes of the holder's or requester's side.
    #[tokio::test]
    async fn boxed_branches() {
        let sidecar = Arc::new(Sidecar::new(Policy::default(), Options::default(), None));
        let upstream = Upstream::new(
            "127.0.0.1:9".parse().unwrap(),
            Role::Outbound,
            None,
            tokio_util::task::TaskTracker::new(),
        );
        let request = Request::new(body::empty());
        let future = handle(sidecar, Role::Outbound, &upstream, request);
        let size = std::mem::size_of_val(&future);
        assert!(size <= 4096, "a call's future is {size} bytes");
    }
}
