//! What the sidecar does to a call beyond forwarding it: `RecvTensor`
//! responses are where tensors travel, so that is the one method it
//! looks inside. Every other call is forwarded untouched.

pub mod record;

use std::sync::Arc;

use http::{Request, Response};

use crate::config::Role;
use crate::proxy::body::{self, ProxyBody};
use crate::proxy::forward::forward;
use crate::proxy::grpc_status;
use crate::proxy::upstream::Upstream;
use record::{RecordedCall, Recorder};

/// The gRPC method TensorFlow moves tensors with.
pub const RECV_TENSOR: &str = "/tensorflow.WorkerService/RecvTensor";

/// Largest request body read (RecvTensor requests are a few hundred bytes).
const MAX_REQUEST: usize = 1 << 20;
/// Largest response body read: TensorFlow's own 2 GiB message limit plus the gRPC prefix.
const MAX_RESPONSE: usize = (2 << 30) + 5;

/// State shared by every call through this sidecar.
#[derive(Debug, Default)]
pub struct Sidecar {
    /// Where to record RecvTensor calls, if anywhere.
    pub recorder: Option<Recorder>,
}

impl Sidecar {
    /// Handles one call arriving on a route with `role`.
    pub async fn handle(
        self: Arc<Self>,
        role: Role,
        upstream: &Upstream,
        request: Request<ProxyBody>,
    ) -> Response<ProxyBody> {
        if request.uri().path() != RECV_TENSOR {
            return forward(upstream, request).await;
        }
        match (&self.recorder, role) {
            (Some(recorder), Role::Outbound) => match recorder.claim() {
                Some(n) => record_call(recorder, n, upstream, request).await,
                None => forward(upstream, request).await,
            },
            _ => forward(upstream, request).await,
        }
    }
}

/// Forwards a call with both bodies read whole, and writes them to files.
async fn record_call(
    recorder: &Recorder,
    n: u64,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let (parts, request_body) = request.into_parts();
    let request_body = match body::collect(request_body, MAX_REQUEST).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::INTERNAL,
                &format!("tlcd: reading request: {err}"),
            )
        }
    };
    let request_headers = parts.headers.clone();
    let path = parts.uri.path().to_owned();
    let request = Request::from_parts(
        parts,
        body::chunks(request_body.chunks.clone(), request_body.trailers.clone()),
    );
    let response = forward(upstream, request).await;
    let (parts, response_body) = response.into_parts();
    let response_body = match body::collect(response_body, MAX_RESPONSE).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading response: {err}"),
            )
        }
    };
    let empty = http::HeaderMap::new();
    recorder.write(
        n,
        &RecordedCall {
            path: &path,
            request_headers: &request_headers,
            request: &request_body.chunks,
            response_headers: &parts.headers,
            response: &response_body.chunks,
            response_trailers: response_body.trailers.as_ref().unwrap_or(&empty),
        },
    );
    Response::from_parts(
        parts,
        body::chunks(response_body.chunks, response_body.trailers),
    )
}
