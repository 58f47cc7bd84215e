//! Serving one accepted connection's HTTP/2: every call handed to the
//! handler, until the client closes, the connection idles out (inbound)
//! or the proxy's shutdown ends it.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use tlc_core::Role;

use super::session;
use super::Bounds;
use crate::batched::Batched;
use crate::body;
use crate::connection::{self, Activity, ConnectionId, Cut};
use crate::handler::{Handler, Unauthenticated};
use crate::io::Io;
use crate::lifecycle::Lifecycle;
use crate::tasks::Tracked;
use crate::tls::PeerIdentity;
use crate::tuning;
use crate::upstream::Upstream;

/// What a connection's client is, as far as the sidecar may trust it.
#[derive(Debug, Clone)]
pub(super) enum Client {
    /// No TLS configured: every caller is taken at its word (`tlc-peer`).
    Open,
    /// A peer sidecar that proved its identity by mutual TLS.
    Peer(PeerIdentity),
    /// Plaintext where TLS is configured: its calls are marked
    /// [`Unauthenticated`], for the handler to serve them as TensorFlow
    /// would, never compressed for and never given a fallback.
    Plaintext,
}

/// What becomes of a request the connection received.
enum Next {
    /// A peer's session, answered at once and served from then on.
    Session(http::Response<body::ProxyBody>),
    /// A call for the handler, in progress until its response body is done.
    Call(http::Request<hyper::body::Incoming>, connection::CallGuard),
}

/// What serving a connection's HTTP/2 needs besides the connection.
pub(super) struct Served<H> {
    pub role: Role,
    pub bounds: Bounds,
    pub handler: Arc<H>,
    pub lifecycle: Lifecycle,
    pub tasks: TaskTracker,
}

/// Serves HTTP/2 on `io` until the client closes, the connection idles
/// out (inbound) or `lifecycle` ends it. Whether it was cut: sent its
/// GOAWAY for being idle and dropped `bounds.close` later, its client
/// not having read it (counted).
pub(super) async fn serve<H: Handler>(
    io: Box<dyn Io>,
    client: Client,
    upstream: Arc<Upstream>,
    served: Served<H>,
) -> bool {
    let Served {
        role,
        bounds,
        handler,
        lifecycle,
        tasks,
    } = served;
    let id = ConnectionId::next();
    let activity = Arc::new(Activity::default());
    let calls = Arc::clone(&activity);
    let stats = Arc::clone(&handler);
    let served_upstream = Arc::clone(&upstream);
    // Cancelled when the connection closes: its peer sessions go away.
    let ending = CancellationToken::new();
    let _ending = ending.clone().drop_guard();
    let sessions = ending.clone();
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let upstream = served_upstream.clone();
        let handler = handler.clone();
        request.extensions_mut().insert(id);
        match &client {
            Client::Open => {}
            Client::Peer(identity) => {
                request.extensions_mut().insert(identity.clone());
            }
            Client::Plaintext => {
                request.extensions_mut().insert(Unauthenticated);
            }
        }
        let next = if role == Role::Inbound && session::is_session(&request) {
            // A peer's session: its calls count one by one, not the session.
            Next::Session(match &client {
                Client::Plaintext => session::refused(),
                Client::Open | Client::Peer(_) => {
                    let serving = session::Serving {
                        handler: Arc::clone(&handler),
                        role,
                        upstream: Arc::clone(&upstream),
                        activity: Arc::clone(&calls),
                        ending: sessions.clone(),
                    };
                    session::serve(request.map(body::stream), serving)
                }
            })
        } else {
            Next::Call(request, calls.begin())
        };
        async move {
            let (request, call) = match next {
                Next::Session(response) => return Ok(response),
                Next::Call(request, call) => (request, call),
            };
            // The handler's future is large (a whole call's state machine):
            // boxed, the connection's task moves a pointer instead of
            // copying that state at each poll (measured: 27 -> 24 us of CPU
            // per small call).
            let response =
                Box::pin(Arc::clone(&handler).handle(role, &upstream, request.map(body::stream)))
                    .await;
            // The call lasts until its response body is done.
            Ok::<_, Infallible>(response.map(|b| body::holding(b, call)))
        }
    });
    let mut builder = http2::Builder::new(Tracked(tasks));
    tuning::server(&mut builder, role);
    let connection = builder.serve_connection(TokioIo::new(Batched::new(io)), service);
    tokio::pin!(connection);
    // Only a peer's connection is closed when idle: the peer's sidecar
    // reconnects on its next call. TensorFlow's own connections (outbound)
    // stay as long as TensorFlow keeps them.
    let idle = bounds.idle.filter(|_| role == Role::Inbound);
    let idle = async {
        match idle {
            Some(limit) => activity.idle_for(limit).await,
            None => std::future::pending().await,
        }
    };
    let mut cut = false;
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = idle => {
            stats.connections().idle_closed();
            debug!("idle; closing gracefully");
            ending.cancel();
            connection.as_mut().graceful_shutdown();
            // The GOAWAY (and hyper's PING after it) needs a client that
            // reads; no call is in progress, so one that has not finished
            // within the close time never will.
            match tokio::time::timeout(bounds.close, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => {
                    stats.connections().cut(Cut::GoawayTimeout);
                    if connection::warn_allowed() {
                        warn!(close_seconds = bounds.close.as_secs(),
                            "an idle connection's client did not close after its GOAWAY; dropping it");
                    }
                    cut = true;
                    Ok(())
                }
            }
        }
        () = lifecycle.ending(role, &upstream, &activity) => {
            // GOAWAY: no new calls, in-flight ones finish. No deadline of
            // its own: the shutdown's (`server.rs`) bounds it, and no
            // listener accepts meanwhile, so no slot is wanted.
            debug!("closing gracefully (shutdown)");
            ending.cancel();
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    match result {
        Ok(()) => debug!("connection closed"),
        Err(err) => debug!(error = %err, "connection ended with an error"),
    }
    cut
}
