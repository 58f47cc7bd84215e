//! TensorFlow's (or a peer's) `RecvTensor` response body, along the path
//! both sidecars take with it: `grpc::parse_single`,
//! `recv_tensor::decode_response`, `recv_tensor::classify`,
//! `fast_parse::check`; then, for a float tensor tlc may compress, the
//! response it writes back (`build_standard_response`), and the hop between
//! two sidecars: an envelope of the raw values in place of the content
//! (`build_response_with_content`), read and decoded as the requester does,
//! and restored.
//!
//! Must hold: no panic; the framed message is the body after its prefix;
//! a classified tensor's content is shared with the body and is elements ×
//! 4 bytes; the rebuilt response decodes and classifies to the same
//! tensor (dims, content bytes, other fields), goes through gRPC framing
//! unchanged, and is one TensorFlow reads on its fast path with exactly
//! those dims and content; the envelope hop restores the same bytes.
//!
//! The first byte is a mode: with its low bit set the gRPC prefix is
//! rewritten to frame the rest, so that mutations of a seed reach the
//! protobuf behind it. Seeds: `cargo run --bin seeds -- corpus`.

#![no_main]

mod grpc_input;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tlc_codec::{Codec, EncodeError, EntropyStage, Limits};
use tlc_context::{decode_push, encode_stateless};
use tlc_sidecar::sidecar::tensor_bytes;
use tlc_sidecar::sidecar::MAX_RESPONSE;
use tlc_wire::tf::fast_parse::{self, NotFast};
use tlc_wire::tf::grpc;
use tlc_wire::tf::proto::DataType;
use tlc_wire::tf::recv_tensor::{
    self, build_response_with_content, build_standard_response, EncodedResponse, FloatTensor,
    ResponseMeta,
};

use grpc_input::mode_and_body;

const DT_FLOAT: i32 = DataType::DtFloat as i32;

/// The requester's bound on a declared tensor (`limits.max_tensor_mib`,
/// here 1 MiB: inputs are far smaller).
const MAX_TENSOR_BYTES: u64 = 1 << 20;

fuzz_target!(|input: &[u8]| {
    let Some((_, body)) = mode_and_body(input) else {
        return;
    };
    let Ok(message) = grpc::parse_single(body.clone(), MAX_RESPONSE) else {
        return;
    };
    assert_eq!(message.len() + grpc::PREFIX_LEN, body.len());
    assert_eq!(message, body.slice(grpc::PREFIX_LEN..));

    let fast = fast_parse::check(&message);
    if let Ok(parsed) = &fast {
        assert!(parsed.dims.len() <= tlc_wire::tf::proto::MAX_DIMS);
        assert!(parsed.content_len.unwrap_or(0) <= message.len() as u64);
    }
    let Ok(response) = recv_tensor::decode_response(message.clone()) else {
        return;
    };
    let Ok(tensor) = recv_tensor::classify(&response) else {
        return;
    };
    check_classified(&message, &tensor);
    let rebuilt = tensor
        .to_response()
        .unwrap_or_else(|e| panic!("a classified tensor rebuilds: {e}"));
    assert_eq!(
        build_response_with_content(&tensor.meta, &tensor.dims, DT_FLOAT, tensor.content.clone())
            .as_ref(),
        Ok(&rebuilt),
        "the standard response is the general builder's with DT_FLOAT"
    );
    check_rebuilt(&tensor, &rebuilt);
    envelope_hop(&tensor, &rebuilt);
});

/// A tensor `classify` accepted from `message`.
fn check_classified(message: &Bytes, tensor: &FloatTensor) {
    assert!(tensor.dims.len() <= tlc_wire::tf::proto::MAX_DIMS);
    assert!(tensor.dims.iter().all(|&d| d <= i64::MAX as u64));
    assert_eq!(tensor.content.len() as u64, tensor.element_count() * 4);
    assert_eq!(tensor.values().len() as u64, tensor.element_count());
    assert!(!tensor.meta.is_dead, "a dead tensor is never compressed");
    if !tensor.content.is_empty() {
        // Not copied: a view into the message.
        let start = message.as_ptr() as usize;
        let at = tensor.content.as_ptr() as usize;
        assert!(at >= start && at + tensor.content.len() <= start + message.len());
    }
}

/// The response tlc writes for `tensor` is the same tensor, framed, and one
/// TensorFlow parses on its fast path.
fn check_rebuilt(tensor: &FloatTensor, rebuilt: &EncodedResponse) {
    assert_eq!(rebuilt.content, tensor.content, "the content is not copied");
    let bytes = Bytes::from(rebuilt.to_vec());
    let again = recv_tensor::decode_response(bytes.clone())
        .unwrap_or_else(|e| panic!("the rebuilt response decodes: {e}"));
    let reclassified =
        recv_tensor::classify(&again).unwrap_or_else(|e| panic!("the rebuilt one classifies: {e}"));
    assert_eq!(
        &reclassified, tensor,
        "rebuilt: same dims, content and meta"
    );
    match fast_parse::check(&bytes) {
        Ok(parsed) => {
            assert!(parsed.has_tensor);
            assert_eq!(parsed.dtype, DT_FLOAT);
            assert_eq!(parsed.dims, tensor.dims);
            assert_eq!(parsed.content_len, Some(tensor.content.len() as u64));
        }
        Err(NotFast::Aborts(abort)) => panic!("TensorFlow would abort on our response: {abort}"),
        Err(e) => panic!("our response is not on TensorFlow's fast path: {e}"),
    }
    let chunks = rebuilt
        .clone()
        .into_grpc_chunks()
        .unwrap_or_else(|e| panic!("a rebuilt response frames: {e}"));
    let framed: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let message = grpc::parse_single(Bytes::from(framed), MAX_RESPONSE)
        .unwrap_or_else(|e| panic!("our framing parses: {e}"));
    assert_eq!(message, bytes);
}

/// Holder: the values in a raw envelope in place of the content, as
/// `holder::compress` sends them. Requester: the envelope read back,
/// checked against the declared shape and decoded, as `requester::prepare`
/// and `restore` do; the restored response must be the original one.
fn envelope_hop(tensor: &FloatTensor, rebuilt: &EncodedResponse) {
    let mut scratch = Vec::new();
    let values = tensor_bytes::as_f32(&tensor.content, &mut scratch);
    let token = 0x0123_4567_89ab_cdef;
    let mut envelope = Vec::new();
    match encode_stateless(values, Codec::None, EntropyStage::Off, token, &mut envelope) {
        Ok(_) => {}
        Err(EncodeError::NonFinite) => {
            assert!(values.iter().any(|v| !v.is_finite()));
            return;
        }
        Err(e) => panic!("raw encoding refused: {e}"),
    }
    let sent =
        build_response_with_content(&tensor.meta, &tensor.dims, DT_FLOAT, Bytes::from(envelope))
            .unwrap_or_else(|e| panic!("an envelope response builds: {e}"));
    let framed: Vec<u8> = sent
        .into_grpc_chunks()
        .unwrap_or_else(|e| panic!("an envelope response frames: {e}"))
        .iter()
        .flat_map(|c| c.iter().copied())
        .collect();

    // The requester's side.
    let message = grpc::parse_single(Bytes::from(framed), MAX_RESPONSE).expect("framed");
    let response = recv_tensor::decode_response(message).expect("decodes");
    let carried = response.tensor.as_ref().expect("has its tensor");
    let dims: Vec<u64> = carried
        .tensor_shape
        .as_ref()
        .expect("has a shape")
        .dim
        .iter()
        .map(|d| u64::try_from(d.size).expect("non-negative"))
        .collect();
    assert_eq!(dims, tensor.dims);
    let Some(content_len) = content_bytes(&dims, MAX_TENSOR_BYTES) else {
        return;
    };
    let limits = Limits {
        max_elements: content_len / 4,
    };
    let mut decoded = Vec::new();
    let pushed = decode_push(&carried.tensor_content, &limits, &mut decoded)
        .unwrap_or_else(|e| panic!("our own envelope decodes: {e}"));
    assert_eq!(pushed.fallback_token, token);
    assert_eq!(decoded.len() as u64 * 4, content_len);
    let restored = build_standard_response(
        &ResponseMeta::of(&response),
        &dims,
        tensor_bytes::into_bytes(decoded),
    )
    .unwrap_or_else(|e| panic!("the restored response builds: {e}"));
    assert_eq!(
        restored.to_vec(),
        rebuilt.to_vec(),
        "restored byte for byte"
    );
}

/// `outbound::content_bytes`: the f32 bytes `dims` declare, if at most
/// `max_tensor`.
fn content_bytes(dims: &[u64], max_tensor: u64) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))?
        .checked_mul(4)
        .filter(|&bytes| bytes <= max_tensor)
}
