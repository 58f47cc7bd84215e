//! The holder's side of `RecvTensor`: a peer sidecar asks for a tensor the
//! local TensorFlow task holds; the response is compressed on its way out.
//!
//! Only calls that announce a peer (`tlc-peer`) are touched. Everything
//! that cannot be compressed safely (not a float tensor, too small, a
//! codec refusal) leaves exactly as TensorFlow sent it.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use tracing::debug;

use super::request_key::{self, TensorCall};
use super::tensor_bytes;
use super::{Sidecar, MAX_RESPONSE};
use crate::context::{PullSource, PushContext, PushKey, ReplicaState};
use crate::peer::{self, ReplicaHeader};
use crate::policy::{Decision, Direction, PassReason, Policy};
use crate::proxy::body::{self, Collected, ProxyBody};
use crate::proxy::forward::forward;
use crate::proxy::grpc_status;
use crate::proxy::upstream::Upstream;
use crate::tf::proto::DataType;
use crate::tf::{grpc, recv_tensor};

/// Handles one `RecvTensor` call arriving from a peer.
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    if !peer::is_peer(request.headers()) {
        return forward(upstream, request).await;
    }
    let replica = request
        .headers()
        .get(peer::REPLICA)
        .and_then(ReplicaHeader::parse)
        .map(|h| ReplicaState {
            epoch: h.epoch,
            version: h.version,
        });
    let (mut parts, request_body) = request.into_parts();
    peer::strip(&mut parts.headers);
    // One policy for the whole call, even if an operator changes it meanwhile.
    let policy = sidecar.policy();
    let (peeked, call) = match request_key::peek_call(request_body, &policy).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let request = Request::from_parts(parts, peeked.into_body());
    let response = forward(upstream, request).await;
    let Some(call) = call else {
        sidecar.stats.passed("request_unreadable");
        return response;
    };
    if policy.never_compresses(call.direction, &call.tensor) {
        // Nothing to decide from the response: stream it through.
        sidecar.stats.passed("policy_skip");
        return response;
    }
    // An error from TensorFlow (a trailers-only response) passes as it is.
    if response.status() != http::StatusCode::OK || response.headers().contains_key("grpc-status") {
        return response;
    }
    let (mut parts, response_body) = response.into_parts();
    let collected = match body::collect(response_body, MAX_RESPONSE).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading TensorFlow's response: {err}"),
            )
        }
    };
    match tokio::task::block_in_place(|| compress(sidecar, &policy, &call, replica, &collected)) {
        Ok(chunks) => {
            parts
                .headers
                .insert(peer::ENVELOPE, HeaderValue::from_static(peer::PROTOCOL));
            Response::from_parts(parts, body::chunks(chunks, collected.trailers))
        }
        Err(reason) => {
            debug!(tensor = %call.tensor, reason, "passing through");
            sidecar.stats.passed(reason);
            Response::from_parts(parts, body::chunks(collected.chunks, collected.trailers))
        }
    }
}

/// The compressed response as gRPC body chunks, or why it stays as it is.
fn compress(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    replica: Option<ReplicaState>,
    collected: &Collected,
) -> Result<Vec<Bytes>, &'static str> {
    let message =
        grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).map_err(|_| "grpc_framing")?;
    let response = recv_tensor::decode_response(message).map_err(|_| "unparsable_response")?;
    let tensor = recv_tensor::classify(&response).map_err(|reason| reason.label())?;
    let raw_bytes = tensor.content.len();
    let choice = match policy.decide(call.direction, &call.tensor, raw_bytes as u64) {
        Decision::Compress(choice) => choice,
        Decision::Pass(PassReason::Small) => return Err("small"),
        Decision::Pass(PassReason::Skipped) => return Err("policy_skip"),
    };
    let mut scratch = Vec::new();
    let values = tensor_bytes::as_f32(&tensor.content, &mut scratch);
    let token = sidecar.fallbacks.token();
    let mut envelope = Vec::with_capacity(raw_bytes / 8 + 256);
    let now = Instant::now();
    match call.direction {
        Direction::Push => {
            let key = PushKey {
                requester_task: call.peer_task.clone(),
                tensor: call.tensor.clone(),
            };
            let context = sidecar.push.get_or_insert_with(&key, now, || {
                PushContext::new(choice.codec, choice.feedback)
            });
            let mut context = crate::context::table::lock(&context);
            context
                .encode(values, choice.codec, token, &mut envelope)
                .map_err(|_| "codec_refused")?;
        }
        Direction::Pull => {
            let source = sidecar.pull.get_or_insert_with(&call.tensor, now, || {
                PullSource::new(sidecar.epochs.next(), sidecar.options.pull_cache_len)
            });
            let mut source = crate::context::table::lock(&source);
            source
                .serve(values, replica, choice.codec, token, &mut envelope)
                .map_err(|_| "codec_refused")?;
        }
    }
    let wire_bytes = envelope.len();
    let built = recv_tensor::build_response_with_content(
        &tensor.meta,
        &tensor.dims,
        DataType::DtFloat as i32,
        Bytes::from(envelope),
    )
    .map_err(|_| "rebuild_failed")?;
    let chunks = built.into_grpc_chunks().map_err(|_| "rebuild_failed")?;
    sidecar
        .stats
        .compressed(call.direction, raw_bytes, wire_bytes);
    sidecar
        .fallbacks
        .keep(token, collected.chunks.clone(), collected.trailers.clone());
    Ok(chunks.to_vec())
}
