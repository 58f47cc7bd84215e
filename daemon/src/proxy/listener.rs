//! Accepting connections on one route and serving each as HTTP/2.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use super::body;
use super::connection::{Activity, ConnectionId, Refusal};
use super::preface::{self, Opening, PrefaceError};
use super::tuning;
use super::upstream::Upstream;
use crate::config::{Listener, Role};
use crate::intercept;
use crate::sidecar::Sidecar;

/// What a listener allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections served at once; more are closed at accept.
    pub max_connections: usize,
    /// Time a new connection has to send its opening bytes.
    pub handshake: Duration,
    /// Time an inbound connection may go without a call; `None`: forever.
    pub idle: Option<Duration>,
}

impl Bounds {
    /// The bounds of `[limits]`.
    pub fn of(limits: &crate::config::limits::Limits) -> Bounds {
        Bounds {
            max_connections: limits.max_connections,
            handshake: limits.handshake,
            idle: limits.idle,
        }
    }
}

/// Serves one route until `shutdown` is cancelled; every connection is
/// spawned on `tracker` so shutdown can wait for them to drain.
pub async fn serve(
    listener: TcpListener,
    route: Listener,
    bounds: Bounds,
    sidecar: Arc<Sidecar>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    info!(listen = %route.listen, target = ?route.target, role = ?route.role, "listening");
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    let mut refusal_log = RateLimit::default();
    while let Some((stream, peer)) = accept(&listener, &shutdown).await {
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            sidecar.stats.connections.refused(Refusal::Limit);
            if refusal_log.allow() {
                warn!(%peer, listen = %route.listen, max = bounds.max_connections,
                    "connection refused: the listener serves limits.max_connections already");
            }
            reset(&stream);
            continue;
        };
        let span = tracing::debug_span!("connection", %peer, listen = %route.listen);
        let connection = connection(stream, route, bounds, sidecar.clone(), shutdown.clone());
        tracker.spawn(
            async move {
                connection.await;
                drop(slot);
            }
            .instrument(span),
        );
    }
}

/// At most one log line per second for a repeated event.
#[derive(Default)]
struct RateLimit {
    last: Option<std::time::Instant>,
}

impl RateLimit {
    fn allow(&mut self) -> bool {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// The next connection on `listener`, or `None` once `shutdown` is
/// cancelled. An accept that fails (out of file descriptors and the like)
/// is logged and retried shortly: the connections that exist keep being
/// served.
pub async fn accept(
    listener: &TcpListener,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => return None,
        };
        match accepted {
            Ok(connection) => return Some(connection),
            Err(err) => {
                let listen = listener.local_addr().ok();
                warn!(?listen, error = %err, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// One accepted connection: HTTP/2 with prior knowledge (h2c), as
/// TensorFlow speaks it. Nothing is done for it (no upstream, no buffers)
/// until its preface has arrived.
async fn connection(
    stream: TcpStream,
    route: Listener,
    bounds: Bounds,
    sidecar: Arc<Sidecar>,
    shutdown: CancellationToken,
) {
    tuning::tcp(&stream);
    let held = Arc::clone(&sidecar);
    let stats = &held.stats.connections;
    let addr = match intercept::upstream_of(&stream, route.target) {
        Ok(addr) => addr,
        Err(err) => {
            warn!(error = %err, "closing connection");
            return;
        }
    };
    let stream = match preface::read_opening(stream, bounds.handshake).await {
        Ok(Opening::Http2(stream)) => stream,
        Ok(Opening::Tls(stream)) => {
            stats.refused(Refusal::Tls);
            debug!("TLS offered, but this listener has no TLS configured; closing");
            reset(stream.get_ref());
            return;
        }
        Err(err) => {
            stats.refused(match err {
                PrefaceError::NotHttp2(_) => Refusal::NotHttp2,
                PrefaceError::Timeout(_) | PrefaceError::Io(_) => Refusal::Handshake,
            });
            debug!(error = %err, "closing connection");
            return;
        }
    };
    let upstream = Arc::new(Upstream::new(addr, route.role));
    // Reach the upstream before answering the caller. If it is not there (a
    // task not listening yet), the caller must see what it would see
    // without a sidecar, a failed connection, so that gRPC waits and
    // retries; answering its calls with UNAVAILABLE would fail them instead.
    if let Err(err) = upstream.sender().await {
        stats.refused(Refusal::Upstream);
        debug!(error = %err, "upstream not reachable; resetting the connection");
        reset(stream.get_ref());
        return;
    }
    let _open = stats.open();
    let role = route.role;
    let id = ConnectionId::next();
    let activity = Arc::new(Activity::default());
    let calls = Arc::clone(&activity);
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let upstream = upstream.clone();
        let sidecar = sidecar.clone();
        let call = calls.begin();
        request.extensions_mut().insert(id);
        async move {
            let response = Arc::clone(&sidecar)
                .handle(role, &upstream, request.map(body::stream))
                .await;
            // A peer may not read what it asked for: what streams to it is
            // charged to the in-flight budget until written.
            let charge = role == Role::Inbound
                && response
                    .extensions()
                    .get::<body::AlreadyCharged>()
                    .is_none();
            let response = if charge {
                response.map(|b| body::charged(b, &sidecar.budget))
            } else {
                response
            };
            // The call lasts until its response body is done.
            Ok::<_, Infallible>(response.map(|b| body::holding(b, call)))
        }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    tuning::server(&mut builder, role);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
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
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = idle => {
            stats.idle_closed();
            debug!("idle; closing gracefully");
            connection.as_mut().graceful_shutdown();
            connection.await
        }
        () = shutdown.cancelled() => {
            // GOAWAY: no new calls, in-flight ones finish.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    match result {
        Ok(()) => debug!("connection closed"),
        Err(err) => debug!(error = %err, "connection ended with an error"),
    }
}

/// Closes `stream` with a reset (SO_LINGER 0) rather than an orderly close,
/// the way a refused connection looks to the caller.
/// The stream is dropped by the caller, right after.
fn reset(stream: &TcpStream) {
    let socket = socket2::SockRef::from(stream);
    if let Err(err) = socket.set_linger(Some(Duration::ZERO)) {
        debug!(error = %err, "cannot set SO_LINGER");
    }
}
