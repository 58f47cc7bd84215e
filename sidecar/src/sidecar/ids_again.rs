//! Ids that cross twice in a step, sent the second time by reference.
//!
//! In a graph whose table is not partitioned, TensorFlow sends a parameter
//! task the lookup ids for the `Gather` and then, for the sparse apply,
//! the gradient's indices: a reshape of the same ids, crossing again in
//! the same step (the asynchronous embedding job: 1.2 of its 10 MB on the
//! hop). Both sidecars keep the first copy for the rows of the step
//! ([`super::row_ids`]). So:
//!
//! - the requester's sidecar asks for it (`tlc-ids: 1`) on every call of
//!   ids, which tells the holder's sidecar it keeps them;
//! - the holder's sidecar, serving ids equal to ids of the same step it
//!   sent that requester in full on such a call ([`sent_in_full`]; never
//!   ids that went as a reference themselves, so two tensors served at
//!   once cannot name each other), leaves the values out and names the
//!   earlier tensor and the ids' hash (`tlc-ids-again`), keeping the
//!   original for a fallback ([`reference`]);
//! - the requester's sidecar puts the values back from its own copy,
//!   checked against the hash and the shape, or fetches the original
//!   ([`restore`]). TensorFlow never sees a response without its values.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::row_ids::IdsKey;
use super::{Sidecar, MAX_RESPONSE};
use tlc_core::TensorCall;
use tlc_proxy::body::Collected;
use tlc_wire::negotiation::IdsAgain;
use tlc_wire::peer::IdsAgainHeader;
use tlc_wire::rows::ids_hash;
use tlc_wire::tf::proto::RecvTensorResponse;
use tlc_wire::tf::recv_tensor::{self, ResponseMeta};
use tlc_wire::tf::{grpc, ids};

/// How long the requester waits for the earlier ids: they were served
/// before this answer, so they are arriving or have arrived.
const PATIENCE: Duration = Duration::from_millis(500);

/// The key of `tensor`'s ids in `call`'s step.
fn key(call: &TensorCall, tensor: &str) -> IdsKey {
    IdsKey {
        src_task: call.holder_task.clone(),
        dst_task: call.requester_task.clone(),
        tensor_name: tensor.to_owned(),
        step_id: call.step_id,
    }
}

/// The most ids one response may hold, from the tensor bound.
fn max_ids(sidecar: &Sidecar) -> usize {
    usize::try_from(sidecar.options().max_tensor_bytes / 4).unwrap_or(usize::MAX)
}

/// Holder: `response`, the answer to `call` holding `ids` (as
/// `keep_row_ids` read them), as a reference to equal ids of the step the
/// requester keeps: the response without its values, as gRPC chunks, and
/// the `tlc-ids-again` header; `None` when there are none (the response
/// then goes as usual).
pub(super) fn reference(
    sidecar: &Sidecar,
    call: &TensorCall,
    response: &RecvTensorResponse,
    ids: &[i64],
    token: u64,
) -> Option<(Vec<Bytes>, IdsAgain)> {
    if ids.is_empty() {
        return None;
    }
    let earlier = sidecar
        .row_ids
        .same_ids_in_step(&key(call, &call.tensor_name), ids)?;
    let shape = ids::ids_shape(response, ids.len()).ok()?;
    let again = IdsAgain::new(IdsAgainHeader {
        token,
        hash: ids_hash(ids),
        tensor: earlier,
    })?;
    let built = recv_tensor::build_response_with_content(
        &ResponseMeta::of(response),
        &shape.dims,
        shape.dtype,
        Bytes::new(),
    )
    .ok()?;
    let chunks = built.into_grpc_chunks().ok()?;
    Some((chunks.to_vec(), again))
}

/// Holder: notes that the ids of `call` go to the requester in full (it
/// asked `tlc-ids`, so it keeps them): later ids of the step may name them.
pub(super) fn sent_in_full(sidecar: &Sidecar, call: &TensorCall) {
    sidecar.row_ids.share(&key(call, &call.tensor_name));
}

/// Requester: the response TensorFlow expects from `collected`, an answer
/// to `call` sent as a reference to the ids `again` names: those ids from
/// this side's copy, checked against the hash and the shape, and kept as
/// `call`'s ids too. Any error leaves nothing changed; the caller fetches
/// the original.
pub(super) async fn restore(
    sidecar: &Sidecar,
    call: &TensorCall,
    again: &IdsAgainHeader,
    collected: &Collected,
) -> Result<Vec<Bytes>, String> {
    let message = grpc::parse_single(collected.to_bytes(), MAX_RESPONSE)
        .map_err(|e| format!("gRPC framing: {e}"))?;
    let response =
        recv_tensor::decode_response(message).map_err(|e| format!("not a response: {e}"))?;
    let shape = ids::ids_shape(&response, max_ids(sidecar)).map_err(|e| e.to_string())?;
    let carries_values = response.tensor.as_ref().is_some_and(|tensor| {
        !(tensor.tensor_content.is_empty()
            && tensor.int64_val.is_empty()
            && tensor.int_val.is_empty())
    });
    if carries_values {
        return Err("a reference that carries values".into());
    }
    let count = shape.count;
    let ids = sidecar
        .row_ids
        .wait_for(&key(call, &again.tensor), PATIENCE)
        .await
        .ok_or_else(|| format!("ids of {} not held", again.tensor))?;
    if ids.len() != count || ids_hash(&ids) != again.hash {
        return Err(format!(
            "held ids of {} do not match ({} for {count} values)",
            again.tensor,
            ids.len()
        ));
    }
    let mut content = Vec::with_capacity(count * shape.width);
    for &id in ids.iter() {
        if shape.width == 8 {
            content.extend_from_slice(&id.to_le_bytes());
        } else {
            let id = i32::try_from(id).map_err(|_| "an int64 id for int32 ids")?;
            content.extend_from_slice(&id.to_le_bytes());
        }
    }
    let built = recv_tensor::build_response_with_content(
        &ResponseMeta::of(&response),
        &shape.dims,
        shape.dtype,
        Bytes::from(content),
    )
    .map_err(|e| e.to_string())?;
    let chunks = built.into_grpc_chunks().map_err(|e| e.to_string())?;
    sidecar
        .row_ids
        .keep(key(call, &call.tensor_name), ids, Instant::now());
    Ok(chunks.to_vec())
}
