//! A stand-in for a TensorFlow task's `RecvTensor` service, speaking its
//! wire format (built with the daemon's own `tf` module, which is checked
//! against real TensorFlow separately), and a client that asks it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tlc_daemon::tf::proto::{RecvTensorRequest, RecvTensorResponse};
use tlc_daemon::tf::recv_tensor::{self, ResponseMeta};
use tlc_daemon::tf::{grpc, RECV_TENSOR_PATH};
use tokio::net::TcpListener;

use super::Client;

/// What the stand-in answers: the tensor (dims, values) for a rendezvous key and step.
pub type Tensors = Arc<dyn Fn(&str, i64) -> (Vec<u64>, Vec<f32>) + Send + Sync>;

/// The gRPC body of a standard response holding `values`.
pub fn response_body(dims: &[u64], values: &[f32]) -> Bytes {
    let meta = ResponseMeta {
        is_dead: false,
        send_start_micros: 1234,
        transport_options: None,
        require_ack: false,
    };
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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            // As TensorFlow's gRPC does: no Nagle delay on small writes.
            let _ = stream.set_nodelay(true);
            let bodies = bodies.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let bodies = bodies.clone();
                    async move {
                        assert_eq!(request.uri().path(), RECV_TENSOR_PATH);
                        assert!(
                            !request
                                .headers()
                                .keys()
                                .any(|k| k.as_str().starts_with("tlc-")),
                            "sidecar headers reached TensorFlow"
                        );
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let message = grpc::parse_single(body, 1 << 20).unwrap();
                        let request = RecvTensorRequest::decode(message).unwrap();
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", "0".parse().unwrap());
                        let frames = vec![
                            Ok::<_, Infallible>(Frame::data(bodies(&request))),
                            Ok(Frame::trailers(trailers)),
                        ];
                        let mut response =
                            Response::new(StreamBody::new(futures_util::stream::iter(frames)));
                        response
                            .headers_mut()
                            .insert("content-type", "application/grpc".parse().unwrap());
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The gRPC body of a `RecvTensor` request (the emulated job's own).
pub use tlc_daemon::demo::wire::request_body;

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
    let fast = tlc_daemon::tf::fast_parse::check(&message);
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
