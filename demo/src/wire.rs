//! `RecvTensor` as TensorFlow's gRPC speaks it, over h2c: a client that
//! asks for a tensor and checks the answer is one TensorFlow's fast parser
//! reads, and a server that answers with the standard response
//! ([`recv_tensor::build_standard_response`]). Both are plain hyper 1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;

use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::grpc_status;
use tlc_sidecar::graph::tap::REGISTER_GRAPH;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::recv_tensor::{self, ResponseMeta};
use tlc_wire::tf::{fast_parse, grpc, RECV_TENSOR_PATH};

use crate::accept::Accepting;

/// HTTP/2 flow-control windows: large enough that a tensor of a few MB is
/// never held up by window updates (TensorFlow's gRPC grows its windows by
/// bandwidth-delay probing to similar sizes).
const STREAM_WINDOW: u32 = 16 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;
/// Largest request a server reads (requests are a few hundred bytes).
const MAX_REQUEST: usize = 1 << 20;

/// Why a `RecvTensor` call failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// No TCP connection.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// HTTP/2 failed (handshake, stream or connection).
    #[error("HTTP/2: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built.
    #[error("building the request: {0}")]
    Request(#[from] http::Error),
    /// The call ended with a gRPC status other than OK.
    #[error("RecvTensor failed with gRPC status {code}: {message}")]
    Status {
        /// The status code.
        code: String,
        /// The status message.
        message: String,
    },
    /// The body is not one gRPC message.
    #[error("response framing: {0}")]
    Frame(#[from] grpc::FrameError),
    /// TensorFlow's fast parser would refuse the response.
    #[error("TensorFlow's fast parser would refuse the response: {0}")]
    NotFast(#[from] fast_parse::NotFast),
    /// The response does not decode.
    #[error("response does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The response holds no usable float tensor.
    #[error("response holds no float tensor: {0}")]
    NotFloat(#[from] recv_tensor::PassReason),
}

/// A float tensor as TensorFlow received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Dimension sizes.
    pub dims: Vec<u64>,
    /// The values.
    pub values: Vec<f32>,
}

/// A client connection to one peer (prior-knowledge HTTP/2, as TF's gRPC).
#[derive(Clone)]
pub struct Client {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    authority: String,
}

impl Client {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Result<Client, WireError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| WireError::Connect { addr, source })?;
        // As TensorFlow's gRPC does: no Nagle delay on small writes.
        tcp.set_nodelay(true)
            .map_err(|source| WireError::Connect { addr, source })?;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake(TokioIo::new(tcp))
            .await?;
        tokio::spawn(connection);
        Ok(Client {
            sender,
            authority: addr.to_string(),
        })
    }

    /// Calls `RecvTensor` for `key` at `step` and returns the tensor, after
    /// checking the response is one TensorFlow reads on its fast path.
    pub async fn recv_tensor(&self, key: &str, step: i64) -> Result<Tensor, WireError> {
        let data = self
            .unary(RECV_TENSOR_PATH, request_body(key, step))
            .await?;
        let message = grpc::parse_single(data.freeze(), grpc::TF_MAX_MESSAGE_LEN)?;
        fast_parse::check(&message)?;
        let response = recv_tensor::decode_response(message)?;
        let tensor = recv_tensor::classify(&response)?;
        Ok(Tensor {
            values: tensor.values().collect(),
            dims: tensor.dims,
        })
    }

    /// Registers a graph partition on the peer, as a TF1 master does
    /// before running it (`request` is a serialized `RegisterGraphRequest`).
    pub async fn register_graph(&self, request: Vec<u8>) -> Result<(), WireError> {
        let (prefix, message) = grpc::encode(Bytes::from(request))?;
        let body = [prefix, message].concat();
        self.unary(REGISTER_GRAPH, Bytes::from(body)).await?;
        Ok(())
    }

    /// One unary call of `path`: the response body, once its gRPC status
    /// says OK.
    async fn unary(&self, path: &str, body: Bytes) -> Result<BytesMut, WireError> {
        let request = Request::post(format!("http://{}{path}", self.authority))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(body))?;
        let response = self.sender.clone().send_request(request).await?;
        let (parts, mut body) = response.into_parts();
        let mut data = BytesMut::new();
        let mut trailers = HeaderMap::new();
        while let Some(frame) = body.frame().await {
            match frame?.into_data() {
                Ok(chunk) => data.extend_from_slice(&chunk),
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        trailers = t;
                    }
                }
            }
        }
        // A trailers-only response carries its status in the headers.
        let status = trailers
            .get("grpc-status")
            .or_else(|| parts.headers.get("grpc-status"));
        let code = status.and_then(|v| v.to_str().ok()).unwrap_or("missing");
        if code != "0" {
            let message = trailers
                .get("grpc-message")
                .or_else(|| parts.headers.get("grpc-message"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            return Err(WireError::Status {
                code: code.to_owned(),
                message,
            });
        }
        Ok(data)
    }
}

/// The gRPC body of a `RecvTensor` request.
pub fn request_body(key: &str, step: i64) -> Bytes {
    let request = RecvTensorRequest {
        step_id: step,
        rendezvous_key: key.to_owned(),
        // TF numbers requests so that a retry can be recognised.
        request_id: step.wrapping_mul(7).wrapping_add(1),
        ..Default::default()
    };
    let message = request.encode_to_vec();
    let mut body = Vec::with_capacity(grpc::PREFIX_LEN + message.len());
    // A request of a few hundred bytes always fits a gRPC prefix.
    body.extend_from_slice(&grpc::prefix(message.len()).unwrap_or_default());
    body.extend_from_slice(&message);
    body.into()
}

/// The little-endian bytes of `values`, as `tensor_content` holds them.
pub fn content_of(values: &[f32]) -> Bytes {
    let mut content = Vec::with_capacity(values.len() * 4);
    for v in values {
        content.extend_from_slice(&v.to_le_bytes());
    }
    content.into()
}

/// gRPC status codes the emulated tasks answer with.
pub mod code {
    /// The tensor is not one this task sends.
    pub const NOT_FOUND: u16 = 5;
    /// The call was cut short (the job is ending).
    pub const ABORTED: u16 = 10;
    /// Not `RecvTensor`.
    pub const UNIMPLEMENTED: u16 = 12;
    /// The request could not be read.
    pub const INTERNAL: u16 = 13;
}

/// A gRPC error status a handler returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// gRPC status code (see [`code`]).
    pub code: u16,
    /// What went wrong.
    pub message: String,
}

/// What a task answers to one request: the tensor's dims and content, or
/// an error status. It may take as long as it needs (a synchronous step).
pub type Handler = Arc<
    dyn Fn(RecvTensorRequest) -> BoxFuture<'static, Result<(Vec<u64>, Bytes), Status>>
        + Send
        + Sync,
>;

/// A task's `RecvTensor` service on a loopback port.
pub struct Server {
    accepting: Accepting,
}

impl Server {
    /// Starts serving `handler` on a free loopback port.
    pub async fn start(handler: Handler) -> std::io::Result<Server> {
        let accepting = Accepting::start(move |stream: TcpStream| {
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            async move {
                let service = service_fn(move |request| answer(handler.clone(), request));
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                builder
                    .initial_stream_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(CONNECTION_WINDOW);
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            }
        })
        .await?;
        Ok(Server { accepting })
    }

    /// Where the service listens.
    pub fn addr(&self) -> SocketAddr {
        self.accepting.addr()
    }

    /// Stops serving and closes every connection.
    pub async fn shutdown(self) {
        self.accepting.shutdown().await
    }
}

/// Answers one call: reads the request, asks the handler, writes the
/// standard response (or a gRPC error).
async fn answer(
    handler: Handler,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if request.uri().path() == REGISTER_GRAPH {
        // The emulated task runs no graph: an empty RegisterGraphResponse.
        return Ok(ok_response(vec![Bytes::from_static(&[0, 0, 0, 0, 0])]));
    }
    if request.uri().path() != RECV_TENSOR_PATH {
        return Ok(grpc_status::response(
            code::UNIMPLEMENTED,
            "only RecvTensor and RegisterGraph are served",
        ));
    }
    let body = match Limited::new(request.into_body(), MAX_REQUEST)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(err) => return Ok(grpc_status::response(code::INTERNAL, &err.to_string())),
    };
    let request = match grpc::parse_single(body, MAX_REQUEST)
        .map_err(|e| e.to_string())
        .and_then(|m| RecvTensorRequest::decode(m).map_err(|e| e.to_string()))
    {
        Ok(request) => request,
        Err(err) => return Ok(grpc_status::response(code::INTERNAL, &err)),
    };
    let (dims, content) = match handler(request).await {
        Ok(tensor) => tensor,
        Err(status) => return Ok(grpc_status::response(status.code, &status.message)),
    };
    let meta = ResponseMeta {
        send_start_micros: now_micros(),
        ..ResponseMeta::default()
    };
    let chunks = match recv_tensor::build_standard_response(&meta, &dims, content)
        .map_err(|e| e.to_string())
        .and_then(|built| built.into_grpc_chunks().map_err(|e| e.to_string()))
    {
        Ok(chunks) => chunks,
        Err(err) => return Ok(grpc_status::response(code::INTERNAL, &err)),
    };
    Ok(ok_response(chunks.to_vec()))
}

/// A successful gRPC response of `chunks`.
fn ok_response(chunks: Vec<Bytes>) -> Response<ProxyBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let mut response = Response::new(body::chunks(chunks, Some(trailers)));
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    response
}

/// Microseconds since the Unix epoch, as TF's `send_start_micros`.
fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
