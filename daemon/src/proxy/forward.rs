//! Forwarding one call: the request goes upstream as it came, the response
//! comes back as it went, bodies and trailers streamed without buffering.

use http::{Request, Response};
use tracing::{debug, warn};

use super::body::ProxyBody;
use super::grpc_status;
use super::upstream::Upstream;

/// Sends `request` to the upstream and returns its response. A failure to
/// reach the upstream becomes a gRPC `UNAVAILABLE` status on this stream.
///
/// A request the upstream connection never took (it had just closed: a
/// peer's sidecar closes idle connections) is sent again once on a new
/// connection; one it took is never repeated, since TensorFlow hands out
/// each tensor once.
pub async fn forward(upstream: &Upstream, request: Request<ProxyBody>) -> Response<ProxyBody> {
    let path = request.uri().path().to_owned();
    let failed = match send(upstream, request).await {
        Sent::Answered(response) => return response,
        Sent::Failed(response) => return response,
        Sent::NotTaken(request, err) => {
            debug!(%path, upstream = %upstream.addr(), error = %err,
                "upstream connection closed before the call was sent; sending it on a new one");
            upstream.discard().await;
            send(upstream, request).await
        }
    };
    match failed {
        Sent::Answered(response) | Sent::Failed(response) => response,
        Sent::NotTaken(_, err) => unavailable(upstream, &path, &err),
    }
}

/// What became of one attempt to send a call.
enum Sent {
    /// The upstream answered (or the proxy made the error response).
    Answered(Response<ProxyBody>),
    /// The call failed; the response says how.
    Failed(Response<ProxyBody>),
    /// The connection never took the call: it can be sent again.
    NotTaken(Request<ProxyBody>, hyper::Error),
}

async fn send(upstream: &Upstream, request: Request<ProxyBody>) -> Sent {
    let path = request.uri().path().to_owned();
    let mut sender = match upstream.sender().await {
        Ok(sender) => sender,
        Err(err) => {
            warn!(%path, error = %err, "upstream unreachable");
            return Sent::Failed(grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: {err}"),
            ));
        }
    };
    match sender.try_send_request(request).await {
        Ok(response) => Sent::Answered(response.map(super::body::stream)),
        Err(mut failed) => match failed.take_message() {
            Some(unsent) => Sent::NotTaken(unsent, failed.into_error()),
            None => Sent::Failed(unavailable(upstream, &path, &failed.into_error())),
        },
    }
}

fn unavailable(upstream: &Upstream, path: &str, err: &hyper::Error) -> Response<ProxyBody> {
    debug!(%path, upstream = %upstream.addr(), error = %err, "upstream call failed");
    grpc_status::response(
        grpc_status::UNAVAILABLE,
        &format!("tlcd: call to {} failed: {err}", upstream.addr()),
    )
}
