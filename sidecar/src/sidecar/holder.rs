//! The holder's side of `RecvTensor`: a peer sidecar asks for a tensor the
//! local TensorFlow task holds; the response is compressed on its way out.
//!
//! Only calls that announce a peer (`tlc-peer`) are touched. Everything
//! that cannot be compressed safely (not a float tensor, too small, a
//! codec refusal) leaves exactly as TensorFlow sent it.

#![allow(clippy::result_large_err)] // see `Stage`

use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use tracing::{debug, warn, Span};

use super::acks;
use super::boundary::{self, forward};
use super::call_state::CallState;
use super::pass::PassReason;
use super::request_key;
use super::Sidecar;
use crate::graph::Classified;
use crate::link::{LinkNow, PayoffKey, Verdict};
use crate::policy::Policy;
use crate::sidecar::calls;
use crate::training::step_reads::{self, Watched};
use tlc_core::Outcome;
use tlc_core::TensorCall;
use tlc_proxy::body::{self, Collected, Peeked, ProxyBody};
use tlc_proxy::connection::ConnectionId;
use tlc_proxy::grpc_status;
use tlc_proxy::limits::budget::Charge;
use tlc_proxy::upstream::Upstream;
use tlc_wire::negotiation::{Ask, Mark};
use tlc_wire::peer;

/// Handles one `RecvTensor` call arriving from a peer, inside its span
/// (see [`calls::measured`]); returns the response and how the call ended.
///
/// The call goes through its stages in order; each either hands the call
/// on or answers it (TensorFlow's response as it came, or an error):
/// only a peer's call is touched ([`peer_call`]), TensorFlow answers it
/// ([`forwarded`]), step counters are watched ([`watched`]), the tensor is
/// classified, the policy and the link may leave it alone ([`wanted`],
/// [`link_verdict`]), it is read whole within the in-flight budget
/// ([`read_whole`]), and compressed and marked for the requester
/// ([`compressed`]).
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
    state: &mut CallState,
) -> (Response<ProxyBody>, Outcome) {
    calls::answered(stages(sidecar, upstream, request, span, state).await)
}

/// A stage's result ([`calls::Stage`]).
type Stage<T> = calls::Stage<T, ProxyBody>;

/// The stages of [`recv_tensor`], in order.
async fn stages(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
    state: &mut CallState,
) -> Stage<(Response<ProxyBody>, Outcome)> {
    let (peer_call, request) = peer_call(sidecar, upstream, request).await?;
    // One policy for the whole call, even if an operator changes it meanwhile.
    let policy = sidecar.policy();
    let (mut call, response) = forwarded(sidecar, upstream, request, &policy).await?;
    let response = watched(sidecar, &call, response).await?;
    let classified = sidecar.classify(&call, peer_call.ask.class);
    call.tensor = classified.context_name(&call.tensor, &call.tensor_name);
    calls::record_call(span, &call);
    span.record("class", classified.class.name());
    let response = wanted(sidecar, &policy, &call, &classified, response)?;
    let (payoff_key, verdict, response) =
        link_verdict(sidecar, &policy, &call, &peer_call, response, state)?;
    let held = read_whole(sidecar, &call, peer_call.max_tensor, response, state).await?;
    // From here on, the answer's body holds the charge of what was read.
    state.charged = true;
    let exactly = Exactly {
        forced: sidecar.forced_exact(&call, policy.check().exact_at_call),
        verdict,
        payoff_key,
    };
    Ok(compressed(
        sidecar,
        &policy,
        (&call, &classified),
        peer_call,
        exactly,
        held,
        span,
    ))
}

/// Stage: only a call from a peer sidecar of this envelope version, on a
/// stamped connection, is touched (anything else goes to TensorFlow as it
/// came). Takes what the requester acknowledged, and what it asked.
async fn peer_call(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Stage<(PeerCall, Request<ProxyBody>)> {
    let Some(ask) = Ask::parse(request.headers()) else {
        return Err(calls::unchanged(forward(upstream, request).await));
    };
    let Some(connection) = ConnectionId::of(&request) else {
        // Every listener stamps its calls; without a connection there is
        // no way to keep a fallback for this one, so it is not compressed.
        return Err(calls::unchanged(forward(upstream, request).await));
    };
    acks::release(sidecar, &ask);
    let source = boundary::source(&request, connection);
    // What the requester decodes, and what this side reads whole.
    let max_tensor = ask
        .max_tensor
        .unwrap_or(u64::MAX)
        .min(sidecar.options().max_tensor_bytes);
    let peer_call = PeerCall {
        ask,
        max_tensor,
        connection,
        source,
    };
    Ok((peer_call, request))
}

/// Stage: the request, without sidecar headers, to TensorFlow, and the
/// call it names read on its way; a call that cannot be read passes.
async fn forwarded(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    policy: &Policy,
) -> Stage<(TensorCall, Response<ProxyBody>)> {
    let (mut parts, request_body) = request.into_parts();
    peer::strip(&mut parts.headers);
    let (peeked, call) = match request_key::peek_call(request_body, policy).await {
        Ok(read) => read,
        Err(response) => return Err((response, Outcome::Error)),
    };
    let request = Request::from_parts(parts, peeked.into_body());
    let response = forward(upstream, request).await;
    let Some(call) = call else {
        sidecar.stats.passed(&PassReason::RequestUnreadable);
        return Err(calls::unchanged(response));
    };
    Ok((call, response))
}

/// Stage: before anything that may pass the response on unread, the step
/// watch sees every step counter read (its response is a few bytes).
async fn watched(
    sidecar: &Sidecar,
    call: &TensorCall,
    response: Response<ProxyBody>,
) -> Stage<Response<ProxyBody>> {
    if !step_reads::is_step_read(call) {
        return Ok(response);
    }
    match step_reads::watch(&sidecar.steps, call, response).await {
        Watched::Pass(response) => Ok(response),
        Watched::Fail(response) => Err((response, Outcome::Error)),
    }
}

/// Stage: what the policy never compresses, and TensorFlow's errors (a
/// trailers-only response), stream through as they are.
fn wanted(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    classified: &Classified,
    response: Response<ProxyBody>,
) -> Stage<Response<ProxyBody>> {
    if policy.never_compresses(call.direction, classified.class, &call.tensor) {
        // Nothing to decide from the response: stream it through.
        sidecar
            .stats
            .passed(&PassReason::Policy(tlc_core::PassReason::Skipped));
        return Err(calls::unchanged(response));
    }
    if response.status() != http::StatusCode::OK || response.headers().contains_key("grpc-status") {
        return Err(calls::unchanged(response));
    }
    Ok(response)
}

/// Stage: whether compressing pays on the link to the requester. Where it
/// does not, the response streams through unread, left alone by hop
/// compression too, and the tensor's memory (error buffer, the
/// requester's replica) stays as it was.
fn link_verdict(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    peer_call: &PeerCall,
    response: Response<ProxyBody>,
    state: &mut CallState,
) -> Stage<(PayoffKey, Verdict, Response<ProxyBody>)> {
    let payoff_key = PayoffKey {
        tensor: call.key(),
        source: peer_call.source.clone(),
        direction: call.direction,
    };
    let link = link_to(sidecar, &call.requester_task, peer_call.ask.link);
    let verdict = sidecar
        .holder
        .payoffs
        .verdict(&payoff_key, link, policy.link(), Instant::now());
    let reason = match verdict {
        Verdict::Compress | Verdict::Probe | Verdict::Settle => {
            return Ok((payoff_key, verdict, response))
        }
        Verdict::Pass => PassReason::LinkFast,
        Verdict::Explore => PassReason::LinkExplore,
    };
    sidecar.stats.passed(&reason);
    state.leave_as_is = true;
    Err(calls::unchanged(response))
}

/// Stage: the response read whole, charged to the in-flight budget with
/// room for the encoder's output; one larger than the requester decodes
/// or than the budget holds streams through as TensorFlow sent it.
async fn read_whole(
    sidecar: &Sidecar,
    call: &TensorCall,
    max_tensor: u64,
    response: Response<ProxyBody>,
    state: &mut CallState,
) -> Stage<Held> {
    let (parts, response_body) = response.into_parts();
    let mut charge = sidecar.budget.empty();
    let limit = usize::try_from(max_tensor)
        .unwrap_or(usize::MAX)
        .saturating_add(RESPONSE_SLACK);
    let collected = match body::peek_charged(response_body, limit, Some(&mut charge)).await {
        Ok(Peeked::Whole(collected)) => collected,
        Ok(partial @ Peeked::Partial(..)) => {
            let read = match &partial {
                Peeked::Partial(read, _) => read.len(),
                Peeked::Whole(_) => 0,
            };
            let reason = if read > limit {
                PassReason::TooLarge
            } else {
                PassReason::MemoryBudget
            };
            if sidecar.stats.passed(&reason) && reason.is_loud() {
                warn_too_large(sidecar, &call.tensor, read);
            }
            let body = body::holding(partial.into_body(), charge);
            state.charged = true;
            return Err((Response::from_parts(parts, body), Outcome::Passed));
        }
        Err(err) => {
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading TensorFlow's response: {err}"),
            );
            return Err((response, Outcome::Error));
        }
    };
    // The encoder's output and scratch: at most the tensor's size again.
    if charge.try_grow(collected.len() as u64).is_err() {
        sidecar
            .stats
            .passed_read(&PassReason::MemoryBudget, collected.len() as u64);
        let body = body::holding(body::chunks(collected.chunks, collected.trailers), charge);
        state.charged = true;
        return Err((Response::from_parts(parts, body), Outcome::Passed));
    }
    Ok(Held {
        parts,
        collected,
        charge,
    })
}

/// A response read whole, and what it is charged.
struct Held {
    parts: http::response::Parts,
    collected: Collected,
    charge: Charge,
}

/// Whether a call goes exactly through the tensor's memory, and the link
/// decision it settles.
struct Exactly {
    /// `[policy.check] exact_at_call` forced it.
    forced: bool,
    /// The link's verdict: [`Verdict::Settle`] asks for it.
    verdict: Verdict,
    /// Where the link decision is kept.
    payoff_key: PayoffKey,
}

/// Stage: the response compressed and marked for the requester, what it
/// cost and saved told to the link decision; or, where it cannot be
/// compressed safely, passed on as TensorFlow sent it.
fn compressed(
    sidecar: &Sidecar,
    policy: &Policy,
    (call, classified): (&TensorCall, &Classified),
    peer_call: PeerCall,
    exactly: Exactly,
    held: Held,
    span: &Span,
) -> (Response<ProxyBody>, Outcome) {
    let Held {
        mut parts,
        collected,
        charge,
    } = held;
    // What compressing costs this tensor, for the link decision: parsing
    // the answer, encoding, rebuilding it (not the wait for its bytes).
    let started = Instant::now();
    let exact = exactly.verdict == Verdict::Settle || exactly.forced;
    let compressed = super::codec_work::run(collected.len(), || {
        let asked = compress::Asked {
            ask: &peer_call.ask,
            max_tensor: peer_call.max_tensor,
            connection: peer_call.connection,
            exact,
        };
        compress::compress(sidecar, policy, (call, classified), asked, &collected, span)
    });
    let (chunks, outcome) = match compressed {
        Ok(compress::Compressed {
            chunks,
            mark,
            keyframe,
        }) => {
            if exactly.forced {
                sidecar.stats.forced_exact();
            }
            let payoffs = &sidecar.holder.payoffs;
            let key = &exactly.payoff_key;
            match (exact, &mark) {
                (true, _) if exactly.verdict == Verdict::Settle => payoffs.settled(key),
                // Forced exact (`[policy.check]`): nothing owed either.
                (true, _) => payoffs.made_current(key),
                // A pull's replica made anew: current, but what it cost and
                // saved says nothing of the deltas that follow.
                (false, Mark::Envelope { .. }) if keyframe => payoffs.made_current(key),
                (false, Mark::Envelope { .. }) => {
                    let wire = chunks.iter().map(Bytes::len).sum();
                    payoffs.record(key, collected.len(), wire, started.elapsed());
                }
                (false, Mark::IdsAgain(_)) => {}
            }
            mark.to_headers(&mut parts.headers);
            (chunks, Outcome::Compressed)
        }
        Err(reason) => {
            debug!(tensor = %call.tensor, reason = reason.label(), "passing through");
            let first = sidecar.stats.passed_read(&reason, collected.len() as u64);
            if first && reason.is_loud() {
                warn_too_large(sidecar, &call.tensor, collected.len());
            }
            (collected.chunks, Outcome::Passed)
        }
    };
    let body = body::holding(body::chunks(chunks, collected.trailers), charge);
    (Response::from_parts(parts, body), outcome)
}

/// Says, once per sidecar, that a tensor crossed uncompressed because it
/// is larger than the sidecars compress: such a tensor is usually the one
/// that matters most (an embedding table), and a counter alone goes unread.
fn warn_too_large(sidecar: &Sidecar, tensor: &str, bytes: usize) {
    warn!(
        tensor,
        mib = bytes >> 20,
        max_tensor_mib = sidecar.options().max_tensor_bytes >> 20,
        "a tensor larger than this sidecar or its peer compresses crosses uncompressed \
         (limits.max_tensor_mib, at most a third of the in-flight budget, itself a quarter \
         of the memory limit): raise the container's memory limit or limits.memory_mib; \
         tlc_passthrough_total{{reason=\"too_large\"}} counts the rest"
    );
}

/// What is known of the link to `requester`: what it measured (its
/// `tlc-link`), else what this side measured of answers from it, for a
/// requester that has not timed its link yet (the links of a job are
/// mostly as fast both ways).
fn link_to(sidecar: &Sidecar, requester: &str, header: Option<peer::LinkHeader>) -> LinkNow {
    let header = header.unwrap_or_default();
    let known = |value: u64| (value > 0).then_some(value as f64);
    LinkNow {
        rate: known(header.rate).or_else(|| sidecar.link_meter.rate(requester, Instant::now())),
        decode_ps_per_byte: known(header.decode_ps_per_byte),
    }
}

/// A peer's call: what its request said beyond the tensor's name, and
/// what this side made of it.
struct PeerCall {
    /// The requester's whole say.
    ask: Ask,
    /// The largest tensor the requester decodes and this side reads whole.
    max_tensor: u64,
    /// The connection the call came on, which alone may claim the fallback.
    connection: ConnectionId,
    /// Who sent the call, as far as this side can tell
    /// ([`boundary::source`]): what it reports of its link moves only the
    /// decisions kept under this name.
    source: String,
}

mod compress;

/// What gRPC and protobuf framing add to a tensor's content in a response.
const RESPONSE_SLACK: usize = 64 << 10;
