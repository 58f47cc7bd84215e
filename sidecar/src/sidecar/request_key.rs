//! Reading a `RecvTensor` request: which tensor, between which tasks, in
//! which direction.

use bytes::Bytes;
use http::Response;
use prost::Message;

use tlc_proxy::body::{self, Peeked, ProxyBody};
use tlc_proxy::grpc_status;

use crate::policy::Policy;
use tlc_core::{Direction, TensorCall};
use tlc_wire::tf::grpc;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::rendezvous::RendezvousKey;

use super::MAX_REQUEST;

/// Reads the call from a request body (one gRPC message); `None` if it
/// cannot be read, in which case the call passes through untouched.
pub fn read(body: &Bytes, policy: &Policy) -> Option<TensorCall> {
    let message = grpc::parse_single(body.clone(), MAX_REQUEST).ok()?;
    let request = RecvTensorRequest::decode(message).ok()?;
    let key = RendezvousKey::parse(&request.rendezvous_key).ok()?;
    let holder = key.src_task()?;
    let peer = key.dst_task()?;
    let direction = if policy.is_parameter_job(&holder.job) {
        Direction::Pull
    } else {
        Direction::Push
    };
    Some(TensorCall {
        tensor: key.context_name().to_owned(),
        tensor_name: key.tensor_name.clone(),
        holder_task: holder.prefix(),
        holder_incarnation: key.src_incarnation,
        requester_task: peer.prefix(),
        direction,
        step_id: request.step_id,
    })
}

/// Reads a request body far enough to know the call: the body (to forward
/// as it was) and the call, `None` if the body is not a `RecvTensor`
/// request this sidecar understands. A body that cannot be read at all is
/// answered with a gRPC error.
pub async fn peek_call(
    request_body: ProxyBody,
    policy: &Policy,
) -> Result<(Peeked, Option<TensorCall>), Response<ProxyBody>> {
    let peeked = body::peek(request_body, MAX_REQUEST).await.map_err(|err| {
        grpc_status::response(
            grpc_status::INTERNAL,
            &format!("tlcd: reading request: {err}"),
        )
    })?;
    let call = match &peeked {
        Peeked::Whole(collected) => read(&collected.to_bytes(), policy),
        Peeked::Partial(..) => None,
    };
    Ok((peeked, call))
}
