//! The requester's side of `RecvTensor`: the local TensorFlow task asks a
//! peer for a tensor. The request announces this sidecar (and, for a pull,
//! the replica it holds); a compressed answer is restored into the standard
//! response TensorFlow expects.
//!
//! If an envelope cannot be used, the original response is fetched from
//! the peer sidecar; TensorFlow never sees an envelope or a tensor that
//! failed a check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use tracing::{debug, warn, Span};

use super::request_key;
use super::{fallback, tensor_bytes, Sidecar, MAX_RESPONSE};
use crate::graph::RowRole;
use crate::link::Answer;
use crate::sidecar::calls;
use crate::training::step_reads::{self, Watched};
use tlc_codec::{CodecId, Limits};
use tlc_context::Restored as Decoded;

use tlc_core::TensorCall;
use tlc_core::{Outcome, Role};
use tlc_proxy::body::{self, Collected, ProxyBody};
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;
use tlc_wire::envelope::EnvelopeHeader;
use tlc_wire::negotiation::{Ask, Mark};
use tlc_wire::peer::{self, IdsAgainHeader, ReplicaHeader};
use tlc_wire::tf::proto::RecvTensorResponse;
use tlc_wire::tf::{grpc, recv_tensor};

/// Handles one `RecvTensor` call from the local TensorFlow task, inside its
/// span (see [`calls::measured`]); returns the response and how the call
/// ended.
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
) -> (Response<ProxyBody>, Outcome) {
    let (mut parts, request_body) = request.into_parts();
    let policy = sidecar.policy();
    let (peeked, call) = match request_key::peek_call(request_body, &policy).await {
        Ok(read) => read,
        Err(response) => return (response, Outcome::Error),
    };
    let Some(mut call) = call else {
        // Not a request we understand: no peer announced, nothing changed.
        sidecar.stats.passed("request_unreadable");
        let request = Request::from_parts(parts, peeked.into_body());
        return calls::unchanged(sidecar.forward(Role::Outbound, upstream, request).await);
    };
    let max_tensor = sidecar.options().max_tensor_bytes;
    let mut ask = Ask {
        max_tensor: Some(max_tensor),
        entropy: true,
        int8_keyframes: true,
        mirror: policy.check().mirror,
        ..Ask::default()
    };
    // What this side's graphs say the tensor is: the holder's sidecar may
    // not have seen the graph (TF2's coordinator routes registrations past it).
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
            .map(|rows| {
                let now = Instant::now();
                sidecar
                    .rows
                    .announce(&call.holder_task, &call.tensor, rows.role, now)
            });
    }
    let agreement_window = measures_agreement(&policy, &call, known.as_ref());
    if agreement_window.is_some() {
        ask.agreement = sidecar.contexts.agreement(&call, Instant::now());
    }
    calls::record_call(span, &call);
    ask.link = Some(sidecar.link_meter.header(&call.holder_task, Instant::now()));
    ask.acks = sidecar.acks.take(&call.holder_task);
    ask.replica = sidecar
        .contexts
        .replica_state(&call, Instant::now())
        .map(|state| ReplicaHeader {
            epoch: state.epoch,
            version: state.version,
        });
    ask.to_headers(&mut parts.headers);
    let response = sidecar
        .forward(
            Role::Outbound,
            upstream,
            Request::from_parts(parts, peeked.into_body()),
        )
        .await;
    let head = Instant::now();
    let mark = Mark::parse(response.headers());
    // A step counter is an integer, never compressed: TensorFlow's own bytes.
    let enveloped = matches!(mark, Ok(Some(Mark::Envelope { .. })));
    let response = if !enveloped && step_reads::is_step_read(&call) {
        match step_reads::watch(&sidecar.steps, &call, response).await {
            Watched::Pass(response) => response,
            Watched::Fail(response) => return (response, Outcome::Error),
        }
    } else {
        response
    };
    let mirror = match mark {
        Ok(Some(Mark::Envelope { mirror })) => mirror,
        Ok(Some(Mark::IdsAgain(again))) => {
            return ids_again(sidecar, upstream, &call, response, again.header()).await
        }
        Ok(None) => return unmarked(sidecar, &call, known.as_ref(), head, response).await,
        Err(err) => {
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %err, "cannot read the holder's mark");
            let response = grpc_status::response(grpc_status::INTERNAL, &format!("tlcd: {err}"));
            return (response, Outcome::Error);
        }
    };
    let (mut parts, response_body) = response.into_parts();
    peer::strip(&mut parts.headers);
    // Every byte of the envelope and of the tensor decoded from it is
    // charged to the in-flight budget, and stays charged until the restored
    // response has left.
    let mut charge = sidecar.budget.empty();
    let limit = usize::try_from(max_tensor)
        .unwrap_or(usize::MAX)
        .saturating_add(ENVELOPE_SLACK);
    let wait = sidecar.options().memory_wait;
    let collected = match body::collect_charged(response_body, limit, Some((&mut charge, wait)))
        .await
    {
        Ok(collected) => collected,
        Err(err) => {
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %err, "cannot read the peer's compressed response");
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading the peer's compressed response: {err}"),
            );
            return (response, Outcome::Error);
        }
    };
    let end = Instant::now();
    let prepared = prepare(&collected, max_tensor);
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
    let restored = match prepared {
        Ok(prepared) => {
            if prepared.rows {
                sidecar.await_row_ids(&call, known.as_ref()).await;
            }
            let decoding = decode_charge(&prepared);
            match charge.grow(decoding, sidecar.options().memory_wait).await {
                Ok(()) => tokio::task::block_in_place(|| {
                    let checks = Checks {
                        mirror,
                        agreement_window,
                    };
                    restore(sidecar, &call, known.as_ref(), (prepared, checks), span)
                }),
                Err(err) => Err(fail(prepared.token, err)),
            }
        }
        Err(failure) => Err(failure),
    };
    match restored {
        Ok(restored) => {
            sidecar
                .stats
                .decoded(call.direction, restored.codec, restored.took);
            sidecar
                .link_meter
                .record_decode(restored.content_len, restored.took);
            if let Some(token) = restored.token {
                // Its original is no longer needed: said on the next call.
                sidecar.acks.restored(&call.holder_task, token);
            }
            if restored.keyframe {
                sidecar.stats.keyframe(Role::Outbound);
            }
            let body = body::chunks(restored.chunks, collected.trailers);
            let body = body::holding(body, charge);
            (Response::from_parts(parts, body), Outcome::Restored)
        }
        Err(failure) => {
            drop(charge);
            sidecar.stats.decode_failed(call.direction);
            warn!(tensor = %call.tensor, error = %failure.reason, "cannot restore a compressed response; asking for the original");
            sidecar.contexts.forget_replica(&call);
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
    let limit = usize::try_from(sidecar.options().max_tensor_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(ENVELOPE_SLACK);
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
    let limit = usize::try_from(sidecar.options().max_tensor_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(ENVELOPE_SLACK);
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

/// Why a response could not be restored, and the token to recover with.
struct Failure {
    token: Option<u64>,
    reason: String,
}

fn fail(token: Option<u64>, reason: impl ToString) -> Failure {
    Failure {
        token,
        reason: reason.to_string(),
    }
}

/// A restored response and what it took.
struct Restored {
    /// The standard response, as gRPC chunks.
    chunks: Vec<Bytes>,
    /// The envelope's first frame's codec.
    codec: CodecId,
    /// Whether the envelope was a keyframe.
    keyframe: bool,
    /// Time spent decoding the envelope into the tensor's content.
    took: Duration,
    /// Bytes of the tensor's content.
    content_len: usize,
    /// The envelope's fallback token.
    token: Option<u64>,
}

/// An envelope response whose framing and shape have been checked, before
/// anything is allocated for its values.
struct Prepared {
    response: RecvTensorResponse,
    dims: Vec<u64>,
    content_len: u64,
    token: Option<u64>,
    /// A row-keyed envelope: restored with the step's ids.
    rows: bool,
    /// What the entropy stage writes for its largest frame.
    entropy_bytes: u64,
}

/// What decoding `prepared` holds at its peak, charged before it starts: a
/// keyframe's or a push's values, their copy as bytes, and the entropy
/// stage's output (the codec payload a frame's zstd decompresses to,
/// before the codec decodes it).
fn decode_charge(prepared: &Prepared) -> u64 {
    prepared
        .content_len
        .saturating_mul(2)
        .saturating_add(prepared.entropy_bytes)
}

/// The most bytes the entropy stage writes for one frame of `envelope`
/// (its declared `raw_len`, which the frame's checks bound by the codec
/// and the element count): frames are decoded one after another, each
/// stage's output dropped before the next. 0 without the stage, and for an
/// envelope that does not parse (its decode fails before allocating).
fn entropy_output_bytes(envelope: &[u8], content_len: u64) -> u64 {
    let limits = Limits {
        max_elements: content_len / 4,
    };
    tlc_wire::envelope::Envelope::parse(envelope, &limits).map_or(0, |parsed| {
        let stage = parsed.frames().iter().filter_map(|f| f.header.raw_len);
        stage.map(u64::from).max().unwrap_or(0)
    })
}

/// Reads the response around an envelope and checks the shape it declares
/// against `max_tensor` bytes.
fn prepare(collected: &Collected, max_tensor: u64) -> Result<Prepared, Failure> {
    let message =
        grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).map_err(|e| fail(None, e))?;
    let response: RecvTensorResponse =
        recv_tensor::decode_response(message).map_err(|e| fail(None, e))?;
    let Some(tensor) = &response.tensor else {
        return Err(fail(None, "response without a tensor"));
    };
    let token = EnvelopeHeader::parse(&tensor.tensor_content)
        .ok()
        .map(|h| h.fallback_token);
    let dims = dims_of(tensor).ok_or_else(|| fail(token, "bad tensor shape"))?;
    let content_len = content_bytes(&dims, max_tensor).map_err(|e| fail(token, e))?;
    let rows = super::rows::is_rows_envelope(&tensor.tensor_content);
    let entropy_bytes = entropy_output_bytes(&tensor.tensor_content, content_len);
    Ok(Prepared {
        response,
        dims,
        content_len,
        token,
        rows,
        entropy_bytes,
    })
}

/// The standard response TensorFlow gets for a prepared envelope, checked
/// against the holder's `mirror` hash if it sent one and counted in the
/// workers' agreement where asked (`checks`).
fn restore(
    sidecar: &Sidecar,
    call: &TensorCall,
    known: Option<&crate::graph::Classified>,
    (prepared, checks): (Prepared, Checks),
    span: &Span,
) -> Result<Restored, Failure> {
    let Prepared {
        response,
        dims,
        content_len,
        token,
        ..
    } = prepared;
    let Some(tensor) = &response.tensor else {
        return Err(fail(None, "response without a tensor"));
    };
    let envelope = &tensor.tensor_content;
    let limits = Limits {
        max_elements: content_len / 4,
    };
    let decoded = if super::rows::is_rows_envelope(envelope) {
        // Embedding or gradient rows by row id, with this step's ids.
        let started = Instant::now();
        let (values, codec) = sidecar
            .restore_rows(call, known, envelope, &limits)
            .map_err(|e| fail(token, e))?;
        Decoded {
            content: tensor_bytes::into_bytes(values),
            codec,
            keyframe: false,
            took: started.elapsed(),
        }
    } else {
        sidecar
            .contexts
            .restore(
                call,
                envelope,
                &limits,
                Instant::now(),
                tensor_bytes::into_bytes,
                tensor_bytes::copy_to_bytes,
            )
            .map_err(|e| fail(token, e))?
    };
    let Decoded {
        content,
        codec,
        keyframe,
        took,
    } = decoded;
    if content.len() as u64 != content_len {
        return Err(fail(token, "decoded tensor has the wrong size"));
    }
    sidecar
        .check_mirror(call, checks.mirror, &content)
        .map_err(|e| fail(token, e))?;
    if let Some(window) = checks.agreement_window {
        let mut scratch = Vec::new();
        let values = tensor_bytes::as_f32(&content, &mut scratch);
        let now = Instant::now();
        sidecar
            .contexts
            .measure_agreement(call, values, window, now);
        debug!(tensor = %call.tensor, holder = %call.holder_task,
            agreement = ?sidecar.contexts.agreement(call, now), "workers' agreement");
    }
    calls::record_sizes(span, codec.name(), content.len(), envelope.len());
    let meta = recv_tensor::ResponseMeta::of(&response);
    let built =
        recv_tensor::build_standard_response(&meta, &dims, content).map_err(|e| fail(token, e))?;
    let chunks = built.into_grpc_chunks().map_err(|e| fail(token, e))?;
    Ok(Restored {
        chunks: chunks.to_vec(),
        codec,
        keyframe,
        took,
        content_len: content_len as usize,
        token,
    })
}

/// What is done with a restored tensor beside handing it to TensorFlow.
struct Checks {
    /// The holder's hash of what should be restored (`tlc-mirror`).
    mirror: Option<u64>,
    /// Counted in the workers' agreement, over windows of this many steps
    /// ([`measures_agreement`]).
    agreement_window: Option<u32>,
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

/// The bytes of f32 content a tensor of `dims` decodes to, checked before
/// anything is allocated. The shape is the peer's word, and decoding
/// allocates what it declares: a shape beyond `max_tensor` bytes (this
/// sidecar's `limits.max_tensor_mib`, which the request announced in
/// `tlc-max`) is refused, so a small zero-run envelope that declares 7·10⁹
/// elements (28 GB) falls back instead of aborting tlcd.
fn content_bytes(dims: &[u64], max_tensor: u64) -> Result<u64, &'static str> {
    let elements = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or("tensor shape overflows")?;
    elements
        .checked_mul(4)
        .filter(|&bytes| bytes <= max_tensor)
        .ok_or("tensor shape larger than this sidecar decodes (limits.max_tensor_mib)")
}

/// Dimension sizes of a tensor, if all are non-negative.
fn dims_of(tensor: &tlc_wire::tf::proto::TensorProto) -> Option<Vec<u64>> {
    let shape = tensor.tensor_shape.as_ref()?;
    shape
        .dim
        .iter()
        .map(|d| u64::try_from(d.size).ok())
        .collect()
}

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

#[cfg(test)]
mod tests;
