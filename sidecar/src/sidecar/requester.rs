//! The requester's side of `RecvTensor`: the local TensorFlow task asks a
//! peer for a tensor. The request announces this sidecar (and, for a pull,
//! the replica it holds); a compressed answer is restored into the standard
//! response TensorFlow expects.
//!
//! If an envelope cannot be used, the original response is fetched from
//! the peer sidecar; TensorFlow never sees an envelope or a tensor that
//! failed a check.

#![allow(clippy::result_large_err)] // see `Stage`

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use tracing::{warn, Span};

use self::restore::{decode_charge, fail, prepare, restore, Checks, Failure, Restored};
use super::acks;
use super::pass::PassReason;
use super::request_key;
use super::{fallback, Sidecar, MAX_RESPONSE};
use crate::graph::{Classified, RowRole};
use crate::link::Answer;
use crate::policy::Policy;
use crate::sidecar::calls;
use crate::training::step_reads::{self, Watched};
use tlc_core::TensorCall;
use tlc_core::{Outcome, Role};
use tlc_proxy::body::{self, Collected, ProxyBody};
use tlc_proxy::grpc_status;
use tlc_proxy::limits::budget::Charge;
use tlc_proxy::upstream::Upstream;
use tlc_wire::negotiation::{Ask, Mark};
use tlc_wire::peer::{self, IdsAgainHeader, ReplicaHeader};
use tlc_wire::tf::{grpc, recv_tensor};

/// Handles one `RecvTensor` call from the local TensorFlow task, inside its
/// span (see [`calls::measured`]); returns the response and how the call
/// ended.
///
/// The call goes through its stages in order; each either hands the call
/// on or answers it: the call is read ([`read_call`]), the request says
/// what this side holds and wants ([`asked`]) and goes to the holder's
/// sidecar, its answer is taken by its mark ([`marked`]), an envelope is
/// read whole within the in-flight budget ([`read_envelope`]), restored
/// ([`decoded`]) and handed to TensorFlow, or the original fetched
/// ([`handed_over`]).
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
) -> (Response<ProxyBody>, Outcome) {
    calls::answered(stages(sidecar, upstream, request, span).await)
}

/// A stage's result ([`calls::Stage`]).
type Stage<T> = calls::Stage<T, ProxyBody>;

/// The stages of [`recv_tensor`], in order.
async fn stages(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
) -> Stage<(Response<ProxyBody>, Outcome)> {
    // One policy for the whole call, even if an operator changes it meanwhile.
    let policy = sidecar.policy();
    let (mut parts, peeked, mut call) = read_call(sidecar, upstream, request, &policy).await?;
    let (ask, asking) = asked(sidecar, &policy, &mut call, span);
    ask.to_headers(&mut parts.headers);
    let request = Request::from_parts(parts, peeked.into_body());
    let response = sidecar.forward(Role::Outbound, upstream, request).await;
    let head = Instant::now();
    let (mirror, response) = marked(sidecar, upstream, &call, &asking, head, response).await?;
    let (parts, collected, mut charge) = read_envelope(sidecar, &call, response).await?;
    let checks = Checks {
        mirror,
        agreement_window: asking.agreement_window,
    };
    let read = (&collected, head);
    let restored = decoded(sidecar, &call, &asking, read, checks, &mut charge, span).await;
    let answer = (parts, collected.trailers, charge);
    Ok(handed_over(sidecar, upstream, &call, restored, answer).await)
}

/// Stage: the call the request names, read on its way; a request this
/// side cannot read goes to the holder as it came, with no peer announced.
async fn read_call(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    policy: &Policy,
) -> Stage<(http::request::Parts, body::Peeked, TensorCall)> {
    let (parts, request_body) = request.into_parts();
    let (peeked, call) = match request_key::peek_call(request_body, policy).await {
        Ok(read) => read,
        Err(response) => return Err((response, Outcome::Error)),
    };
    let Some(call) = call else {
        sidecar.stats.passed(&PassReason::RequestUnreadable);
        let request = Request::from_parts(parts, peeked.into_body());
        let response = sidecar.forward(Role::Outbound, upstream, request).await;
        return Err(calls::unchanged(response));
    };
    Ok((parts, peeked, call))
}

/// What the requester's side knows of a call beyond its name, for the
/// stages after the ask.
struct Asking {
    /// What this side's graphs say the tensor is.
    known: Option<Classified>,
    /// Whether the restored tensor counts in the workers' agreement, over
    /// windows of this many steps ([`measures_agreement`]).
    agreement_window: Option<u32>,
}

/// Stage: what the request tells the holder's sidecar: what this side
/// decodes, what its graphs say the tensor is (the holder's sidecar may
/// not have seen the graph: TF2's coordinator routes registrations past
/// it), the rows and replica it holds, the workers' agreement, the link,
/// and the envelopes it restored. Names `call` by its context.
fn asked(sidecar: &Sidecar, policy: &Policy, call: &mut TensorCall, span: &Span) -> (Ask, Asking) {
    let now = Instant::now();
    let mut ask = Ask {
        max_tensor: Some(sidecar.options().max_tensor_bytes),
        entropy: true,
        compact: true,
        int8_keyframes: true,
        mirror: policy.check().mirror,
        ..Ask::default()
    };
    let known = sidecar
        .graphs
        .lookup(&call.holder_task, &call.requester_task, &call.tensor_name);
    if let Some(known) = &known {
        ask.class = Some(peer::ClassHint {
            class: known.class,
            function: known.function.is_some(),
            accumulated: known.accumulated,
            adaptive: known.adaptive,
        });
        call.tensor = known.context_name(&call.tensor, &call.tensor_name);
        // This side keeps them: the holder may send equal ids of the step
        // again by reference (`ids_again`).
        ask.ids = known.rows.as_ref().is_some_and(|r| r.role == RowRole::Ids);
        ask.rows = known
            .rows
            .as_ref()
            .filter(|r| r.role != RowRole::Ids)
            .map(|rows| sidecar.announce_rows(call, rows.role, now));
    }
    let agreement_window = measures_agreement(policy, call, known.as_ref());
    if agreement_window.is_some() {
        ask.agreement = sidecar.contexts.agreement(call, now);
    }
    calls::record_call(span, call);
    ask.link = Some(sidecar.link_meter.header(&call.holder_task, now));
    acks::ask(sidecar, call, &mut ask);
    ask.replica = sidecar
        .contexts
        .replica_state(call, now)
        .map(|state| ReplicaHeader {
            epoch: state.epoch,
            version: state.version,
        });
    let asking = Asking {
        known,
        agreement_window,
    };
    (ask, asking)
}

/// Stage: the answer taken by its mark. An envelope goes on to be
/// restored (with the hash to check it against, if any); ids sent again
/// are restored from this side's copy; an unmarked answer is TensorFlow's
/// own and goes to it untouched; a mark this build cannot read fails the
/// call. Step counters, never compressed, are watched first.
async fn marked(
    sidecar: &Sidecar,
    upstream: &Upstream,
    call: &TensorCall,
    asking: &Asking,
    head: Instant,
    response: Response<ProxyBody>,
) -> Stage<(Option<u64>, Response<ProxyBody>)> {
    let mark = Mark::parse(response.headers());
    let enveloped = matches!(mark, Ok(Some(Mark::Envelope { .. })));
    let response = if !enveloped && step_reads::is_step_read(call) {
        match step_reads::watch(&sidecar.steps, call, response).await {
            Watched::Pass(response) => response,
            Watched::Fail(response) => return Err((response, Outcome::Error)),
        }
    } else {
        response
    };
    match mark {
        Ok(Some(Mark::Envelope { mirror })) => Ok((mirror, response)),
        Ok(Some(Mark::IdsAgain(again))) => {
            Err(ids_again(sidecar, upstream, call, response, again.header()).await)
        }
        Ok(None) => Err(unmarked(sidecar, call, asking.known.as_ref(), head, response).await),
        Err(err) => {
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %err, "cannot read the holder's mark");
            let response = grpc_status::response(grpc_status::INTERNAL, &format!("tlcd: {err}"));
            Err((response, Outcome::Error))
        }
    }
}

/// Stage: the envelope read whole. Every byte of it, and of the tensor
/// decoded from it, is charged to the in-flight budget and stays charged
/// until the restored response has left.
async fn read_envelope(
    sidecar: &Sidecar,
    call: &TensorCall,
    response: Response<ProxyBody>,
) -> Stage<(http::response::Parts, Collected, Charge)> {
    let (mut parts, response_body) = response.into_parts();
    peer::strip(&mut parts.headers);
    let mut charge = sidecar.budget.empty();
    let limit = envelope_limit(sidecar);
    let wait = sidecar.options().memory_wait;
    match body::collect_charged(response_body, limit, Some((&mut charge, wait))).await {
        Ok(collected) => Ok((parts, collected, charge)),
        Err(err) => {
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %err, "cannot read the peer's compressed response");
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading the peer's compressed response: {err}"),
            );
            Err((response, Outcome::Error))
        }
    }
}

/// Stage: the envelope `collected` (its first bytes at `head`) timed for
/// the link, checked, charged for its decode and restored.
async fn decoded(
    sidecar: &Sidecar,
    call: &TensorCall,
    asking: &Asking,
    (collected, head): (&Collected, Instant),
    checks: Checks,
    charge: &mut Charge,
    span: &Span,
) -> Result<Restored, Failure> {
    let end = Instant::now();
    let prepared = prepare(collected, sidecar.options().max_tensor_bytes);
    // An envelope about as large as its tensor (a call that settles what
    // raw calls left, a lossless codec) times the link as a raw answer does.
    let bytes = collected.len() as u64;
    let answer = Answer {
        head,
        end,
        bytes,
        raw: prepared
            .as_ref()
            .is_ok_and(|p| bytes.saturating_mul(2) >= p.content_len),
    };
    sidecar.link_meter.record(&call.holder_task, answer);
    let prepared = prepared?;
    let known = asking.known.as_ref();
    let row_ids = if prepared.rows {
        sidecar.row_ids_for(call, known).await
    } else {
        None
    };
    let decoding = decode_charge(&prepared);
    match charge.grow(decoding, sidecar.options().memory_wait).await {
        Ok(()) => {
            let bytes = usize::try_from(prepared.content_len).unwrap_or(usize::MAX);
            let restoring = (prepared, row_ids.as_deref(), checks);
            super::codec_work::run(bytes, || restore(sidecar, call, restoring, span))
        }
        Err(err) => Err(fail(prepared.token, err)),
    }
}

/// Stage: the restored response handed to TensorFlow, still charged; or,
/// where the envelope could not be restored, the original fetched from the
/// holder's sidecar.
async fn handed_over(
    sidecar: &Sidecar,
    upstream: &Upstream,
    call: &TensorCall,
    restored: Result<Restored, Failure>,
    (parts, trailers, charge): (http::response::Parts, Option<http::HeaderMap>, Charge),
) -> (Response<ProxyBody>, Outcome) {
    match restored {
        Ok(restored) => {
            let direction = call.direction;
            let (codec, took) = (restored.codec, restored.took);
            sidecar.stats.decoded(direction, codec, took);
            sidecar.link_meter.record_decode(restored.content_len, took);
            if let Some(token) = restored.token {
                acks::restored(sidecar, call, token);
            }
            if restored.keyframe {
                sidecar.stats.keyframe(Role::Outbound);
            }
            let body = body::chunks(restored.chunks, trailers);
            let body = body::holding(body, charge);
            (Response::from_parts(parts, body), Outcome::Restored)
        }
        Err(failure) => {
            drop(charge);
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %failure.reason, "cannot restore a compressed response; asking for the original");
            sidecar.contexts.forget_replica(call);
            recover(sidecar, upstream, failure.token).await
        }
    }
}

/// The answer to `call` for TensorFlow from `response`, ids sent again by
/// reference to ids of the step this side holds: restored from them, or
/// the original fetched.
async fn ids_again(
    sidecar: &Sidecar,
    upstream: &Upstream,
    call: &TensorCall,
    response: Response<ProxyBody>,
    again: &IdsAgainHeader,
) -> (Response<ProxyBody>, Outcome) {
    let (mut parts, body) = response.into_parts();
    peer::strip(&mut parts.headers);
    let mut charge = sidecar.budget.empty();
    let limit = envelope_limit(sidecar);
    let wait = sidecar.options().memory_wait;
    let restored = match body::collect_charged(body, limit, Some((&mut charge, wait))).await {
        Ok(collected) => super::ids_again::restore(sidecar, call, again, &collected)
            .await
            .map(|chunks| (chunks, collected.trailers)),
        Err(err) => Err(format!("reading the peer's response: {err}")),
    };
    // The restored ids are charged too, until the response has left.
    let restored = match restored {
        Ok((chunks, trailers)) => {
            let bytes: usize = chunks.iter().map(Bytes::len).sum();
            charge
                .grow(bytes as u64, wait)
                .await
                .map(|()| (chunks, trailers))
                .map_err(|err| format!("no memory for the restored ids: {err}"))
        }
        failed => failed,
    };
    match restored {
        Ok((chunks, trailers)) => {
            let body = body::holding(body::chunks(chunks, trailers), charge);
            (Response::from_parts(parts, body), Outcome::Restored)
        }
        Err(reason) => {
            drop(charge);
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %reason, "cannot restore ids sent again; asking for the original");
            recover(sidecar, upstream, Some(again.token)).await
        }
    }
}

/// An answer the holder left unmarked (TensorFlow's own): handed on
/// untouched, timed for the link's rate, its row ids read on their way
/// where the graph says it carries some.
async fn unmarked(
    sidecar: &Sidecar,
    call: &TensorCall,
    known: Option<&crate::graph::Classified>,
    head: Instant,
    response: Response<ProxyBody>,
) -> (Response<ProxyBody>, Outcome) {
    let meter = Arc::clone(&sidecar.link_meter);
    let holder = call.holder_task.clone();
    let response = response.map(|body| {
        body::measured(body, move |bytes| {
            let end = Instant::now();
            let answer = Answer {
                head,
                end,
                bytes,
                raw: true,
            };
            meter.record(&holder, answer);
        })
    });
    if known.is_some_and(|k| k.rows.is_some()) {
        return calls::unchanged(keep_row_ids(sidecar, call, known, response).await);
    }
    calls::unchanged(response)
}

/// `response` as it came, its row ids kept first if the graph says it
/// carries some and it is read whole within the tensor bound (anything
/// else passes unread).
async fn keep_row_ids(
    sidecar: &Sidecar,
    call: &TensorCall,
    known: Option<&crate::graph::Classified>,
    response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    let is_ids = known
        .and_then(|k| k.rows.as_ref())
        .is_some_and(|r| r.role == crate::graph::RowRole::Ids);
    if !is_ids || response.status() != http::StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    let limit = envelope_limit(sidecar);
    // Charged to the in-flight budget like every response read whole; one
    // the budget cannot hold streams through unread.
    let mut charge = sidecar.budget.empty();
    match body::peek_charged(body, limit, Some(&mut charge)).await {
        Ok(body::Peeked::Whole(collected)) => {
            let message = grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).ok();
            if let Some(response) = message.and_then(|m| recv_tensor::decode_response(m).ok()) {
                sidecar.keep_row_ids(call, known, &response);
            }
            let body = body::chunks(collected.chunks, collected.trailers);
            Response::from_parts(parts, body::holding(body, charge))
        }
        Ok(partial) => Response::from_parts(parts, body::holding(partial.into_body(), charge)),
        Err(err) => grpc_status::response(
            grpc_status::UNAVAILABLE,
            &format!("tlcd: reading the peer's response: {err}"),
        ),
    }
}

/// What an envelope's framing may add to the tensor it carries (gRPC and
/// protobuf headers, the envelope header, frame headers): a raw frame is
/// 4 bytes per element plus these.
const ENVELOPE_SLACK: usize = 64 << 10;

/// The most bytes of a holder's answer this side reads whole: the largest
/// tensor it decodes (`limits.max_tensor_mib`), and its framing.
fn envelope_limit(sidecar: &Sidecar) -> usize {
    usize::try_from(sidecar.options().max_tensor_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(ENVELOPE_SLACK)
}

/// Where the fidelity controller asks for the workers' agreement: a dense
/// gradient the graph shows collected by an accumulator (a synchronous
/// step, one push per worker), measured over windows of this many rounds.
/// Elsewhere the holder hears nothing and keeps the tight bound.
fn measures_agreement(
    policy: &crate::policy::Policy,
    call: &TensorCall,
    known: Option<&crate::graph::Classified>,
) -> Option<u32> {
    let regimes = policy.refine().push(true, false).regimes;
    (regimes.asks_agreement()
        && call.direction == tlc_core::Direction::Push
        && known.is_some_and(|k| k.accumulated && k.rows.is_none()))
    .then_some(regimes.window)
}

mod restore;

/// Fetches the original response for `token` from the peer sidecar.
async fn recover(
    sidecar: &Sidecar,
    upstream: &Upstream,
    token: Option<u64>,
) -> (Response<ProxyBody>, Outcome) {
    let Some(token) = token else {
        let response = grpc_status::response(
            grpc_status::INTERNAL,
            "tlcd: compressed response unreadable and without a fallback token",
        );
        return (response, Outcome::Error);
    };
    match fallback::fetch(upstream, token).await {
        Ok(response) => {
            sidecar.stats.fallback_fetched();
            (response, Outcome::Fallback)
        }
        Err(err) => {
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!(
                    "tlcd: compressed response unreadable and the original is unavailable: {err}"
                ),
            );
            (response, Outcome::Error)
        }
    }
}
