//! The requester's side of `RecvTensor`: the local TensorFlow task asks a
//! peer for a tensor. The request announces this sidecar (and, for a pull,
//! the replica it holds); a compressed answer is restored into the standard
//! response TensorFlow expects.
//!
//! If an envelope cannot be used, the original response is fetched from
//! the peer sidecar; TensorFlow never sees an envelope or a tensor that
//! failed a check.

use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use tracing::warn;

use super::request_key::{self, TensorCall};
use super::{fallback, tensor_bytes, Sidecar, MAX_RESPONSE};
use crate::context::envelope::{EnvelopeHeader, Kind};
use crate::context::{decode_push, ReplicaKey};
use crate::peer::{self, ReplicaHeader};
use crate::policy::Direction;
use crate::proxy::body::{self, Collected, ProxyBody};
use crate::proxy::forward::forward;
use crate::proxy::grpc_status;
use crate::proxy::upstream::Upstream;
use crate::tf::proto::RecvTensorResponse;
use crate::tf::{grpc, recv_tensor};
use tlc_codec::Limits;

/// Handles one `RecvTensor` call from the local TensorFlow task.
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let (mut parts, request_body) = request.into_parts();
    let (peeked, call) = match request_key::peek_call(request_body, &sidecar.policy()).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let Some(call) = call else {
        // Not a request we understand: no peer announced, nothing changed.
        sidecar.stats.passed("request_unreadable");
        return forward(upstream, Request::from_parts(parts, peeked.into_body())).await;
    };
    let replica_key = replica_key(&call);
    parts
        .headers
        .insert(peer::PEER, http::HeaderValue::from_static(peer::PROTOCOL));
    if let Some(state) = replica_key
        .as_ref()
        .and_then(|key| sidecar.replicas.state(key, Instant::now()))
    {
        let header = ReplicaHeader {
            epoch: state.epoch,
            version: state.version,
        };
        parts.headers.insert(peer::REPLICA, header.to_header());
    }
    let response = forward(upstream, Request::from_parts(parts, peeked.into_body())).await;
    if !peer::has_envelope(response.headers()) {
        // Not compressed: stream it through untouched.
        return response;
    }
    let (mut parts, response_body) = response.into_parts();
    peer::strip(&mut parts.headers);
    let collected = match body::collect(response_body, MAX_RESPONSE).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading the peer's response: {err}"),
            )
        }
    };
    let restored =
        tokio::task::block_in_place(|| restore(sidecar, replica_key.as_ref(), &collected));
    match restored {
        Ok(chunks) => {
            sidecar
                .stats
                .restored
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Response::from_parts(parts, body::chunks(chunks, collected.trailers))
        }
        Err(failure) => {
            sidecar
                .stats
                .decode_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            warn!(tensor = %call.tensor, error = %failure.reason, "cannot restore a compressed response; asking for the original");
            if let Some(key) = &replica_key {
                sidecar.replicas.table().remove(key);
            }
            recover(sidecar, upstream, failure.token).await
        }
    }
}

/// The replica a pull from a parameter task goes into.
fn replica_key(call: &TensorCall) -> Option<ReplicaKey> {
    (call.direction == Direction::Pull).then(|| ReplicaKey {
        holder: call.holder_task.clone(),
        tensor: call.tensor.clone(),
    })
}

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

/// The standard response TensorFlow gets for an envelope, as gRPC chunks.
fn restore(
    sidecar: &Sidecar,
    replica_key: Option<&ReplicaKey>,
    collected: &Collected,
) -> Result<Vec<Bytes>, Failure> {
    let message =
        grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).map_err(|e| fail(None, e))?;
    let response: RecvTensorResponse =
        recv_tensor::decode_response(message).map_err(|e| fail(None, e))?;
    let Some(tensor) = &response.tensor else {
        return Err(fail(None, "response without a tensor"));
    };
    let envelope = &tensor.tensor_content;
    let token = EnvelopeHeader::parse(envelope)
        .ok()
        .map(|h| h.fallback_token);
    let dims = dims_of(tensor).ok_or_else(|| fail(token, "bad tensor shape"))?;
    let elements = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let elements = elements.ok_or_else(|| fail(token, "tensor shape overflows"))?;
    let limits = Limits {
        max_elements: elements,
    };
    let header = EnvelopeHeader::parse(envelope).map_err(|e| fail(token, e))?;
    let content = match header.kind {
        Kind::Push => {
            let mut values = Vec::new();
            decode_push(envelope, &limits, &mut values).map_err(|e| fail(token, e))?;
            tensor_bytes::into_bytes(values)
        }
        Kind::Chain | Kind::Keyframe => {
            let key = replica_key
                .ok_or_else(|| fail(token, "pull envelope for a call that is not a pull"))?;
            sidecar
                .replicas
                .apply(
                    key,
                    envelope,
                    &limits,
                    Instant::now(),
                    tensor_bytes::copy_to_bytes,
                )
                .map_err(|e| fail(token, e))?
        }
    };
    if content.len() as u64 != elements * 4 {
        return Err(fail(token, "decoded tensor has the wrong size"));
    }
    let meta = recv_tensor::ResponseMeta::of(&response);
    let built =
        recv_tensor::build_standard_response(&meta, &dims, content).map_err(|e| fail(token, e))?;
    Ok(built
        .into_grpc_chunks()
        .map_err(|e| fail(token, e))?
        .to_vec())
}

/// Dimension sizes of a tensor, if all are non-negative.
fn dims_of(tensor: &crate::tf::proto::TensorProto) -> Option<Vec<u64>> {
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
) -> Response<ProxyBody> {
    let Some(token) = token else {
        return grpc_status::response(
            grpc_status::INTERNAL,
            "tlcd: compressed response unreadable and without a fallback token",
        );
    };
    match fallback::fetch(upstream, token).await {
        Ok(response) => {
            sidecar
                .stats
                .fallbacks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            response
        }
        Err(err) => grpc_status::response(
            grpc_status::UNAVAILABLE,
            &format!("tlcd: compressed response unreadable and the original is unavailable: {err}"),
        ),
    }
}
