//! Where calls cross between TensorFlow and the sidecars: no `tlc-*`
//! header crosses it either way, in headers or trailers, and what a peer
//! reports of its link is kept apart from what other peers report.
//!
//! Sidecar headers are what two sidecars tell each other; each side reads
//! what it needs before its call crosses and then strips every name under
//! [`peer::PREFIX`] (by prefix: one a hostile peer made up goes too). On
//! the holder's side that is the request forwarded to TensorFlow (and
//! TensorFlow's own answer, before the sidecar marks it); on the
//! requester's side, the request TensorFlow sends (before the sidecar
//! marks it) and the answer handed back to TensorFlow.

use http::{Request, Response};
use http_body_util::BodyExt;
use tlc_proxy::body::ProxyBody;
use tlc_proxy::connection::ConnectionId;
use tlc_proxy::tls::PeerIdentity;
use tlc_proxy::upstream::Upstream;
use tlc_wire::peer;

/// Sends `request` to the local TensorFlow task (the holder's side),
/// without any sidecar header; its answer comes back without any either,
/// so that only what this sidecar adds reaches the peer.
pub(crate) async fn forward(
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let response = tlc_proxy::forward::forward(upstream, stripped(request)).await;
    stripped_response(response)
}

/// `request` without sidecar headers, in its headers or its trailers.
pub(crate) fn stripped(request: Request<ProxyBody>) -> Request<ProxyBody> {
    let (mut parts, body) = request.into_parts();
    peer::strip(&mut parts.headers);
    Request::from_parts(parts, without_in_trailers(body))
}

/// `response` without sidecar headers, in its headers or its trailers:
/// what the requester's side hands TensorFlow once it has read them.
pub(crate) fn stripped_response(response: Response<ProxyBody>) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    peer::strip(&mut parts.headers);
    Response::from_parts(parts, without_in_trailers(body))
}

/// `body` as it streams, its trailers (if any) stripped of sidecar
/// headers; data frames pass untouched.
fn without_in_trailers(body: ProxyBody) -> ProxyBody {
    body.map_frame(|mut frame| {
        if let Some(trailers) = frame.trailers_mut() {
            peer::strip(trailers);
        }
        frame
    })
    .boxed_unsync()
}

/// Who sent a call, as far as this side can tell, whatever the call says
/// of itself: the identity its TLS certificate was accepted as, else the
/// connection it came on. What a peer reports (its `tlc-link`) moves only
/// the decisions kept under this name, so one connection cannot move
/// those of another requester by naming its task.
pub(crate) fn source<B>(request: &Request<B>, connection: ConnectionId) -> String {
    match request.extensions().get::<PeerIdentity>() {
        Some(identity) => format!("tls {identity}"),
        None => format!("connection {}", connection.0),
    }
}
