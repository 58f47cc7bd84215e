//! Forwarding one call: the request goes upstream as it came, the response
//! comes back as it went, bodies and trailers streamed without buffering.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tracing::{debug, warn};

use super::body::{BoxError, ProxyBody};
use super::grpc_status;
use super::upstream::Upstream;

/// Sends `request` to the upstream and returns its response. A failure to
/// reach the upstream becomes a gRPC `UNAVAILABLE` status on this stream.
///
/// A request the upstream connection never took (it had just closed: a
/// peer's sidecar closes idle connections; or it had received a GOAWAY,
/// as from a sidecar handing over to its successor, and refused new
/// calls before hyper noticed) is sent again once on a new connection; one
/// it took is never repeated, since TensorFlow hands out each tensor once.
pub async fn forward(upstream: &Upstream, request: Request<ProxyBody>) -> Response<ProxyBody> {
    // Where the peer's sidecar shares a session, a call goes on it; one
    // the session does not take comes back unsent, for a stream.
    let request = match upstream.session().await {
        Some(session) => match session.send(request).await {
            Ok(response) => return response,
            Err(unsent) => unsent,
        },
        None => request,
    };
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
    let (request, replay) = Unread::wrap(request);
    match sender.try_send_request(request).await {
        Ok(response) => Sent::Answered(response.map(super::body::stream)),
        Err(mut failed) => match failed.take_message().or_else(|| replay.take()) {
            Some(unsent) => Sent::NotTaken(unsent, failed.into_error()),
            None => Sent::Failed(unavailable(upstream, &path, &failed.into_error())),
        },
    }
}

/// A request's body as hyper gets it: the real body stays in a shared
/// slot until hyper first reads it. A call that failed before its body
/// was read never reached the upstream's handler (h2 refuses new streams
/// on a connection that received a GOAWAY, and hyper then drops the
/// request), so the request can be made again from the slot.
struct Unread {
    slot: Arc<Mutex<Option<ProxyBody>>>,
    taken: Option<ProxyBody>,
    end_stream: bool,
    size: SizeHint,
}

/// What is left to send `request` again; see [`Unread`].
struct Replay {
    head: Option<http::request::Parts>,
    slot: Arc<Mutex<Option<ProxyBody>>>,
}

impl Unread {
    fn wrap(request: Request<ProxyBody>) -> (Request<ProxyBody>, Replay) {
        let (head, body) = request.into_parts();
        // An empty body is never read: whether it was sent cannot be told.
        let replayable = !body.is_end_stream();
        let mut copy = Request::new(());
        *copy.method_mut() = head.method.clone();
        *copy.uri_mut() = head.uri.clone();
        *copy.version_mut() = head.version;
        *copy.headers_mut() = head.headers.clone();
        let unread = Unread {
            end_stream: body.is_end_stream(),
            size: body.size_hint(),
            slot: Arc::new(Mutex::new(Some(body))),
            taken: None,
        };
        let replay = Replay {
            head: replayable.then(|| copy.into_parts().0),
            slot: Arc::clone(&unread.slot),
        };
        let request = Request::from_parts(head, super::body::stream(unread));
        (request, replay)
    }
}

impl Replay {
    /// The request again, if its body was never read.
    fn take(self) -> Option<Request<ProxyBody>> {
        let head = self.head?;
        let body = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        Some(Request::from_parts(head, body))
    }
}

impl Body for Unread {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.taken.is_none() {
            let body = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            match body {
                Some(body) => self.taken = Some(body),
                // Only a replay empties the slot, once hyper has dropped
                // this body unread: never reached.
                None => return Poll::Ready(None),
            }
        }
        match self.taken.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.taken {
            Some(body) => body.is_end_stream(),
            None => self.end_stream,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.taken {
            Some(body) => body.size_hint(),
            None => self.size,
        }
    }
}

fn unavailable(upstream: &Upstream, path: &str, err: &hyper::Error) -> Response<ProxyBody> {
    let cause = with_causes(err);
    debug!(%path, upstream = %upstream.addr(), error = %cause, "upstream call failed");
    grpc_status::response(
        grpc_status::UNAVAILABLE,
        &format!("tlcd: call to {} failed: {cause}", upstream.addr()),
    )
}

/// `err` and what caused it: hyper says only "http2 error", h2 says which
/// (a GOAWAY, a reset stream and its reason, a closed connection).
fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn request(body: &'static [u8]) -> Request<ProxyBody> {
        Request::post("http://upstream/x.Y/Z")
            .header("te", "trailers")
            .body(crate::body::full(body))
            .expect("a request")
    }

    #[tokio::test]
    async fn a_request_whose_body_was_never_read_can_be_sent_again() {
        let (sent, replay) = Unread::wrap(request(b"\0\0\0\0\x01x"));
        // hyper dropped it unread (h2 refused the stream after a GOAWAY).
        drop(sent);
        let again = replay.take().expect("the request again");
        assert_eq!(again.uri().path(), "/x.Y/Z");
        assert_eq!(again.headers()["te"], "trailers");
        let body = again.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"\0\0\0\0\x01x");
    }

    #[tokio::test]
    async fn a_request_whose_body_was_read_is_never_sent_again() {
        let (sent, replay) = Unread::wrap(request(b"\0\0\0\0\x01x"));
        let body = sent.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"\0\0\0\0\x01x");
        assert!(replay.take().is_none());
        // An empty body is never read, so whether it left cannot be told.
        let (sent, replay) = Unread::wrap(request(b""));
        drop(sent);
        assert!(replay.take().is_none());
    }
}
