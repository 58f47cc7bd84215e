//! A stand-in for a TensorFlow task's `RecvTensor` service, speaking its
//! wire format (built with the daemon's own `tf` module, which is checked
//! against real TensorFlow separately), and a client that asks it.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prost::Message;
use tlc_wire::tf::proto::{RecvTensorRequest, RecvTensorResponse};
use tlc_wire::tf::recv_tensor::{self, ResponseMeta};
use tlc_wire::tf::{grpc, RECV_TENSOR_PATH};

use super::Client;

/// What the stand-in answers: the tensor (dims, values) for a rendezvous key and step.
pub type Tensors = Arc<dyn Fn(&str, i64) -> (Vec<u64>, Vec<f32>) + Send + Sync>;

/// What the stand-ins put around a tensor.
fn meta() -> ResponseMeta {
    ResponseMeta {
        is_dead: false,
        send_start_micros: 1234,
        transport_options: None,
        require_ack: false,
    }
}

/// The gRPC body of a response whose float tensor declares `dims` and
/// carries `envelope` as its content (what a holder's sidecar sends).
pub fn envelope_body(dims: &[u64], envelope: Vec<u8>) -> Bytes {
    let built = recv_tensor::build_response_with_content(
        &meta(),
        dims,
        tlc_wire::tf::proto::DataType::DtFloat as i32,
        envelope.into(),
    )
    .unwrap();
    built.into_grpc_chunks().unwrap().concat().into()
}

/// The gRPC body of a standard response holding `values`.
pub fn response_body(dims: &[u64], values: &[f32]) -> Bytes {
    let meta = meta();
    let content: Bytes = values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>()
        .into();
    let built = recv_tensor::build_standard_response(&meta, dims, content).unwrap();
    let chunks = built.into_grpc_chunks().unwrap();
    chunks
        .iter()
        .flat_map(|c| c.iter().copied())
        .collect::<Vec<u8>>()
        .into()
}

/// What a raw stand-in answers: the whole gRPC body for a request.
pub type Bodies = Arc<dyn Fn(&RecvTensorRequest) -> Bytes + Send + Sync>;

/// Starts the stand-in answering with tensors; returns its address.
pub async fn start_tensor_server(tensors: Tensors) -> SocketAddr {
    start_raw_server(Arc::new(move |request: &RecvTensorRequest| {
        let (dims, values) = tensors(&request.rendezvous_key, request.step_id);
        response_body(&dims, &values)
    }))
    .await
}

/// Starts a stand-in answering with given gRPC bodies (recorded from real
/// TensorFlow, say); returns its address.
pub async fn start_raw_server(bodies: Bodies) -> SocketAddr {
    super::serve(Arc::new(move |request: Request<Incoming>| {
        let bodies = bodies.clone();
        Box::pin(async move {
            if request.uri().path() == tlc_sidecar::graph::tap::REGISTER_GRAPH {
                // As TensorFlow answers a registration: after reading it,
                // an empty message (a graph handle the tests never use).
                let _ = request.into_body().collect().await;
                let body = Bytes::from_static(&[0, 0, 0, 0, 0]);
                return super::grpc_response(body, HeaderMap::new());
            }
            assert_eq!(request.uri().path(), RECV_TENSOR_PATH);
            assert!(
                !request
                    .headers()
                    .keys()
                    .any(|k| k.as_str().starts_with("tlc-")),
                "sidecar headers reached TensorFlow: {:?}",
                request.headers()
            );
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let message = grpc::parse_single(body, 1 << 20).unwrap();
            let request = RecvTensorRequest::decode(message).unwrap();
            super::grpc_response(bodies(&request), HeaderMap::new())
        })
    }))
    .await
}

/// The gRPC body of a response carrying `ids` as an int64 tensor: what a
/// worker answers when asked for an embedding lookup's ids.
pub fn ids_body(ids: &[i64]) -> Bytes {
    let content: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    let built = recv_tensor::build_response_with_content(
        &ResponseMeta::default(),
        &[ids.len() as u64],
        tlc_wire::tf::proto::DataType::DtInt64 as i32,
        Bytes::from(content),
    )
    .unwrap();
    built.into_grpc_chunks().unwrap().concat().into()
}

/// The gRPC body of a `RecvTensor` request (the emulated job's own).
pub use tlc_demo::wire::request_body;

/// Calls `RecvTensor` for `key` at `step` saying it is a peer sidecar
/// (`tlc-peer`), as a requester's sidecar does: the call a holder answers
/// with an envelope. The reply is unchecked: tests look at what came.
pub async fn call_as_peer(client: &Client, key: &str, step: i64) -> super::Reply {
    let as_peer = [(tlc_wire::peer::PEER, tlc_wire::peer::PROTOCOL)];
    client
        .call(RECV_TENSOR_PATH, &as_peer, request_body(key, step))
        .await
}

/// A finished `RecvTensor` call.
pub struct Received {
    /// The raw gRPC body as TensorFlow would receive it.
    pub body: Bytes,
    /// The decoded response.
    pub response: RecvTensorResponse,
    /// The tensor's values.
    pub values: Vec<f32>,
    /// Response headers.
    pub headers: HeaderMap,
}

/// Calls `RecvTensor` for `key` at `step` and checks the answer is a
/// standard response TensorFlow's fast path reads.
pub async fn recv(client: &Client, key: &str, step: i64) -> Received {
    let reply = client
        .call(RECV_TENSOR_PATH, &[], request_body(key, step))
        .await;
    assert_eq!(
        reply.trailers["grpc-status"], "0",
        "headers {:?}",
        reply.headers
    );
    let message = grpc::parse_single(reply.body.clone(), usize::MAX).unwrap();
    let fast = tlc_wire::tf::fast_parse::check(&message);
    assert!(
        fast.is_ok(),
        "TF's fast parser would refuse this response: {fast:?}"
    );
    let response = recv_tensor::decode_response(message).unwrap();
    let tensor = recv_tensor::classify(&response).expect("a float tensor");
    let values = tensor.values().collect();
    Received {
        body: reply.body,
        response,
        values,
        headers: reply.headers,
    }
}
