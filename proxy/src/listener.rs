//! Accepting connections on one route and serving each as HTTP/2.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use tlc_core::Role;

use crate::batched::Batched;
use crate::body;
use crate::connection::{self, Activity, ConnectionId, ConnectionStats, Refusal};
use crate::handler::{Handler, Unauthenticated};
use crate::intercept::{self, Target};
use crate::io::Io;
use crate::lifecycle::Lifecycle;
use crate::linger::{self, LINGER_BYTES, LINGER_TIME};
use crate::opaque;
use crate::preface::{self, Opening};
use crate::tasks::Tracked;
use crate::tls::{PeerIdentity, TlsContext};
use crate::tuning;
use crate::upstream::Upstream;

/// One listening socket and what it does with connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Address to accept on.
    pub listen: SocketAddr,
    /// Where to forward.
    pub target: Target,
    /// Which side of the path.
    pub role: Role,
}

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
    pub fn of(limits: &crate::limits::settings::Limits) -> Bounds {
        Bounds {
            max_connections: limits.max_connections,
            handshake: limits.handshake,
            idle: limits.idle,
        }
    }
}

/// Serves one route until `lifecycle` stops accepting; every connection,
/// and every task it spawns, runs on `tracker` so shutdown can wait for
/// them to end.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    route: Listener,
    bounds: Bounds,
    tls: Option<Arc<TlsContext>>,
    handler: Arc<H>,
    lifecycle: Lifecycle,
    tracker: TaskTracker,
) {
    info!(listen = %route.listen, target = ?route.target, role = ?route.role, "listening");
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    while let Some((stream, peer)) = accept(&listener, lifecycle.accepting()).await {
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            handler.connections().refused(Refusal::Limit);
            if connection::warn_allowed() {
                warn!(%peer, listen = %route.listen, max = bounds.max_connections,
                    "connection refused: the listener serves limits.max_connections already");
            }
            reset(&stream);
            continue;
        };
        let span = tracing::debug_span!("connection", %peer, listen = %route.listen);
        let connection = serve_connection(
            stream,
            route.clone(),
            bounds,
            tls.clone(),
            handler.clone(),
            lifecycle.clone(),
            tracker.clone(),
        );
        tracker.spawn(
            async move {
                connection.await;
                drop(slot);
            }
            .instrument(span),
        );
    }
}

/// The next connection on `listener`, or `None` once `stop` is cancelled. An accept that fails (out of file descriptors and the like)
/// is logged and retried shortly: the connections that exist keep being
/// served.
pub async fn accept(
    listener: &TcpListener,
    stop: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            // Stopping wins over a connection waiting in the queue: after a
            // take-over, the successor accepts it from the same socket.
            biased;
            () = stop.cancelled() => return None,
            accepted = listener.accept() => accepted,
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

/// What a connection's client is, as far as the sidecar may trust it.
#[derive(Debug, Clone)]
enum Client {
    /// No TLS configured: every caller is taken at its word (`tlc-peer`).
    Open,
    /// A peer sidecar that proved its identity by mutual TLS.
    Peer(PeerIdentity),
    /// Plaintext where TLS is configured: its calls are marked
    /// [`Unauthenticated`], for the handler to serve them as TensorFlow
    /// would, never compressed for and never given a fallback.
    Plaintext,
}

/// One accepted connection: HTTP/2 with prior knowledge (h2c) as
/// TensorFlow speaks it, or HTTP/2 over mutual TLS from a peer sidecar.
/// Nothing is done for it (no upstream, no buffers) until its opening
/// bytes have arrived. Once served, it is closed without a reset (see
/// [`linger`]), so that the client reads the end of every response.
async fn serve_connection<H: Handler>(
    stream: TcpStream,
    route: Listener,
    bounds: Bounds,
    tls: Option<Arc<TlsContext>>,
    handler: Arc<H>,
    lifecycle: Lifecycle,
    tasks: TaskTracker,
) {
    tuning::tcp(&stream);
    let held = Arc::clone(&handler);
    let stats = held.connections();
    let addrs = match intercept::upstream_of(&stream, &route.target).await {
        Ok(addrs) => addrs,
        Err(err) => {
            warn!(error = %err, "closing connection");
            return;
        }
    };
    let opening = match preface::read_opening(stream, bounds.handshake).await {
        Ok(opening) => opening,
        Err(err) => {
            stats.refused(Refusal::Handshake);
            debug!(error = %err, "closing connection");
            return;
        }
    };
    // TLS is spoken with peers: accepted on the inbound side, dialled on
    // the outbound side. TensorFlow's own connections stay plaintext.
    let (accept_tls, dial_tls) = match route.role {
        Role::Inbound => (tls, None),
        Role::Outbound => (None, tls),
    };
    let (io, client): (Box<dyn Io>, Client) = match (opening, accept_tls) {
        (Opening::Tls(stream), Some(tls)) => match tls.accept(stream).await {
            Ok((stream, identity)) => {
                debug!(peer = %identity, "peer authenticated");
                (Box::new(stream), Client::Peer(identity))
            }
            Err(err) => {
                stats.refused(Refusal::Tls);
                if connection::warn_allowed() {
                    warn!(error = %err, "TLS handshake with a peer failed; closing");
                }
                return;
            }
        },
        (Opening::Tls(stream), None) => {
            stats.refused(Refusal::Tls);
            debug!("TLS offered, but this listener takes no TLS; closing");
            reset(stream.get_ref());
            return;
        }
        (Opening::Other(stream), _) => {
            forward_opaque(stream, addrs[0], bounds, &lifecycle, stats).await;
            return;
        }
        (Opening::Http2(stream), Some(_)) => (Box::new(stream), Client::Plaintext),
        (Opening::Http2(stream), None) => (Box::new(stream), Client::Open),
    };
    // Reach the upstream before answering the caller. If it is not there (a
    // task not listening yet), the caller must see what it would see
    // without a sidecar, a failed connection, so that gRPC waits and
    // retries; answering its calls with UNAVAILABLE would fail them instead.
    // A name's addresses are tried in turn.
    let mut reached = None;
    for addr in addrs {
        let upstream = Arc::new(Upstream::new(
            addr,
            route.role,
            dial_tls.clone(),
            tasks.clone(),
        ));
        match upstream.sender().await {
            Ok(_) => {
                reached = Some(upstream);
                break;
            }
            Err(err) if err.is_tls() && connection::warn_allowed() => {
                warn!(error = %err, "cannot reach the peer's sidecar over TLS");
            }
            Err(err) => debug!(error = %err, "upstream not reachable"),
        }
    }
    let Some(upstream) = reached else {
        stats.refused(Refusal::Upstream);
        debug!("no upstream reachable; resetting the connection");
        // Dropping the connection unanswered; a reset where we can.
        return;
    };
    let (io, returned) = linger::lend(io);
    let open = stats.open();
    let served = Served {
        role: route.role,
        bounds,
        handler,
        lifecycle,
        tasks,
    };
    serve_http2(Box::new(io), client, upstream, served).await;
    drop(open);
    // hyper has dropped the stream: it comes back here to be closed.
    if let Ok(io) = returned.await {
        let how = linger::linger(io, LINGER_TIME, LINGER_BYTES).await;
        debug!(?how, "connection closed");
    }
}

/// A connection that speaks another protocol: forwarded to `addr` as it
/// is (see [`opaque`]), and said so, since tlcd does nothing for it.
async fn forward_opaque(
    stream: preface::Prefixed<TcpStream>,
    addr: SocketAddr,
    bounds: Bounds,
    lifecycle: &Lifecycle,
    stats: &ConnectionStats,
) {
    stats.opaque();
    if connection::warn_allowed() {
        info!(%addr, "a connection that is not HTTP/2 is forwarded untouched (nothing compressed)");
    }
    let open = stats.open();
    match opaque::forward(stream, addr, bounds.handshake, lifecycle).await {
        Ok(Ok(copied)) => debug!(?copied, "forwarded connection closed"),
        Ok(Err(err)) => debug!(error = %err, "forwarded connection ended with an error"),
        Err(err) => {
            stats.refused(Refusal::Upstream);
            debug!(error = %err, "cannot forward a connection that is not HTTP/2");
        }
    }
    drop(open);
}

/// What serving a connection's HTTP/2 needs besides the connection.
struct Served<H> {
    role: Role,
    bounds: Bounds,
    handler: Arc<H>,
    lifecycle: Lifecycle,
    tasks: TaskTracker,
}

/// Serves HTTP/2 on `io` until the client closes, the connection idles
/// out (inbound) or `lifecycle` ends it.
async fn serve_http2<H: Handler>(
    io: Box<dyn Io>,
    client: Client,
    upstream: Arc<Upstream>,
    served: Served<H>,
) {
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
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let upstream = served_upstream.clone();
        let handler = handler.clone();
        let call = calls.begin();
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
        async move {
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
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = idle => {
            stats.connections().idle_closed();
            debug!("idle; closing gracefully");
            connection.as_mut().graceful_shutdown();
            connection.await
        }
        () = lifecycle.ending(role, &upstream, &activity) => {
            // GOAWAY: no new calls, in-flight ones finish.
            debug!("closing gracefully (shutdown)");
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
