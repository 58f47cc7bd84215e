//! Forwarding one call: the request goes upstream as it came, the response
//! comes back as it went, bodies and trailers streamed without buffering.

use http::{Request, Response};
use tracing::{debug, warn};

use super::body::ProxyBody;
use super::grpc_status;
use super::upstream::Upstream;

/// Sends `request` to the upstream and returns its response. A failure to
/// reach the upstream becomes a gRPC `UNAVAILABLE` status on this stream.
pub async fn forward(upstream: &Upstream, request: Request<ProxyBody>) -> Response<ProxyBody> {
    let path = request.uri().path().to_owned();
    let mut sender = match upstream.sender().await {
        Ok(sender) => sender,
        Err(err) => {
            warn!(%path, error = %err, "upstream unreachable");
            return grpc_status::response(grpc_status::UNAVAILABLE, &format!("tlcd: {err}"));
        }
    };
    match sender.send_request(request).await {
        Ok(response) => response.map(super::body::stream),
        Err(err) => {
            debug!(%path, upstream = %upstream.addr(), error = %err, "upstream call failed");
            grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: call to {} failed: {err}", upstream.addr()),
            )
        }
    }
}
