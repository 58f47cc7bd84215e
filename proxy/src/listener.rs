//! Accepting connections on one route and serving each: as HTTP/2
//! ([`http2`]), or forwarded untouched when it speaks something else
//! ([`opaque_route`]), within the listener's [`Bounds`].

mod http2;
mod opaque_route;
pub mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use tlc_core::Role;

use crate::connection::{self, Refusal};
use crate::handler::Handler;
use crate::intercept::{self, Destination, Resolver, Target};
use crate::io::Io;
use crate::lifecycle::Lifecycle;
use crate::linger::{self, LINGER_BYTES, LINGER_TIME};
use crate::preface::{self, Opening};
use crate::tls::{PeerIdentity, TlsContext};
use crate::tuning;
use crate::upstream::Upstream;
use http2::{Client, Served};

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
    /// Connections forwarded untouched at once, within `max_connections`.
    pub max_opaque_connections: usize,
    /// Time a forwarded connection may pass no byte either way.
    pub opaque_idle: Duration,
    /// Time a closing connection has to finish: after an idle HTTP/2
    /// connection's GOAWAY, after one side of a forwarded one closed.
    pub close: Duration,
    /// Silence after which a new connection is taken for a protocol whose
    /// server speaks first, and forwarded.
    pub server_first: Duration,
    /// Whether an outbound connection carries its calls to a peer's
    /// sidecar in one session ([`crate::mux`]) where the peer takes one.
    pub sessions: bool,
}

impl Bounds {
    /// The bounds of `[limits]`.
    pub fn of(limits: &crate::limits::settings::Limits) -> Bounds {
        Bounds {
            max_connections: limits.max_connections,
            handshake: limits.handshake,
            idle: limits.idle,
            max_opaque_connections: limits.max_opaque_connections,
            opaque_idle: limits.opaque_idle,
            close: limits.close,
            server_first: limits.server_first,
            sessions: false,
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
    let site = Arc::new(Site {
        route: route.clone(),
        bounds,
        tls,
        handler: handler.clone(),
        lifecycle: lifecycle.clone(),
        tasks: tracker.clone(),
        opaque: Arc::new(Semaphore::new(bounds.max_opaque_connections)),
        resolver: Resolver::default(),
    });
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
        let connection = serve_connection(stream, site.clone());
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

/// What every connection of one listener shares.
struct Site<H> {
    route: Listener,
    bounds: Bounds,
    tls: Option<Arc<TlsContext>>,
    handler: Arc<H>,
    lifecycle: Lifecycle,
    tasks: TaskTracker,
    /// Slots for connections forwarded untouched, within the listener's.
    opaque: Arc<Semaphore>,
    resolver: Resolver,
}

impl<H: Handler> Site<H> {
    /// The addresses of `destination`, looked up (or kept from a moment
    /// ago) now that the connection is worth it; `None` (counted) if the
    /// name does not resolve.
    async fn addrs(&self, destination: &Destination) -> Option<Arc<[SocketAddr]>> {
        match self.resolver.resolve(destination).await {
            Ok(addrs) => Some(addrs),
            Err(err) => {
                self.handler.connections().refused(Refusal::Upstream);
                if connection::warn_allowed() {
                    warn!(error = %err, "closing connection: its upstream does not resolve");
                }
                None
            }
        }
    }
}

/// One accepted connection: HTTP/2 with prior knowledge (h2c) as
/// TensorFlow speaks it, HTTP/2 over mutual TLS from a peer sidecar, or
/// another protocol, forwarded untouched (see [`opaque_route`]). Nothing
/// is done for it (no lookup, no upstream, no buffers) until its opening
/// bytes have arrived. Once served, an HTTP/2 connection is closed without
/// a reset (see [`linger`]), so that the client reads the end of every
/// response.
async fn serve_connection<H: Handler>(stream: TcpStream, site: Arc<Site<H>>) {
    tuning::tcp(&stream);
    let accepted = Instant::now();
    let stats = site.handler.connections();
    let destination = match intercept::destination_of(&stream, &site.route.target) {
        Ok(destination) => destination,
        Err(err) => {
            warn!(error = %err, "closing connection");
            return;
        }
    };
    // TLS is spoken with peers: accepted on the inbound side, dialled on
    // the outbound side. TensorFlow's own connections stay plaintext.
    let (accept_tls, dial_tls) = match site.route.role {
        Role::Inbound => (site.tls.clone(), None),
        Role::Outbound => (None, site.tls.clone()),
    };
    // Silence is taken for a protocol whose server speaks first only where
    // such a connection may be forwarded: a listener that takes TLS
    // forwards nothing that arrives in plaintext.
    let server_first = accept_tls.is_none().then_some(site.bounds.server_first);
    let opening = match preface::read_opening(stream, site.bounds.handshake, server_first).await {
        Ok(opening) => opening,
        Err(err) => {
            stats.refused(Refusal::Handshake);
            debug!(error = %err, "closing connection");
            return;
        }
    };
    let (io, client): (Box<dyn Io>, Client) = match (opening, accept_tls) {
        (Opening::Tls(stream), Some(tls)) => {
            let Some((stream, identity)) = accept_peer(&tls, stream, &site).await else {
                return;
            };
            // What the peer says inside TLS: HTTP/2 from its sidecar, or
            // another protocol its sidecar carries for a local client.
            let left = site.bounds.handshake.saturating_sub(accepted.elapsed());
            match preface::read_opening(stream, left, Some(site.bounds.server_first)).await {
                Ok(Opening::Http2(stream)) => (Box::new(stream), Client::Peer(identity)),
                Ok(Opening::Other(stream) | Opening::Silent(stream) | Opening::Tls(stream)) => {
                    let Some(slot) = opaque_route::slot(&site) else {
                        return;
                    };
                    debug!(peer = %identity, "the peer carries a connection that is not HTTP/2");
                    opaque_route::forward(stream, slot, &site, &destination, None, accepted).await;
                    return;
                }
                Err(err) => {
                    stats.refused(Refusal::Handshake);
                    debug!(peer = %identity, error = %err, "closing connection");
                    return;
                }
            }
        }
        (Opening::Tls(stream), None) => {
            stats.refused(Refusal::Tls);
            debug!("TLS offered, but this listener takes no TLS; closing");
            reset(stream.get_ref());
            return;
        }
        (Opening::Other(stream) | Opening::Silent(stream), Some(_)) => {
            // Unauthenticated bytes must not reach the task behind a
            // listener that takes TLS: only a peer's sidecar forwards
            // other protocols, inside TLS.
            stats.refused(Refusal::Tls);
            if connection::warn_allowed() {
                warn!("plaintext that is not HTTP/2 where TLS is required; closing, nothing forwarded");
            }
            reset(stream.get_ref());
            return;
        }
        (Opening::Other(stream) | Opening::Silent(stream), None) => {
            let Some(slot) = opaque_route::slot(&site) else {
                reset(stream.get_ref());
                return;
            };
            opaque_route::forward(stream, slot, &site, &destination, dial_tls, accepted).await;
            return;
        }
        (Opening::Http2(stream), Some(tls)) if tls.accepts_plaintext() => {
            (Box::new(stream), Client::Plaintext)
        }
        (Opening::Http2(stream), Some(_)) => {
            // A caller that did not authenticate reaches nothing behind a
            // listener that takes TLS (`tls.accept_plaintext` for a rollout).
            stats.refused(Refusal::Tls);
            if connection::warn_allowed() {
                warn!(
                    "plaintext HTTP/2 where TLS is required (a task without a sidecar?); closing, \
                     nothing forwarded (tls.accept_plaintext = true forwards it during a rollout)"
                );
            }
            reset(stream.get_ref());
            return;
        }
        (Opening::Http2(stream), None) => (Box::new(stream), Client::Open),
    };
    let Some(addrs) = site.addrs(&destination).await else {
        return;
    };
    // Reach the upstream before answering the caller. If it is not there (a
    // task not listening yet), the caller must see what it would see
    // without a sidecar, a failed connection, so that gRPC waits and
    // retries; answering its calls with UNAVAILABLE would fail them instead.
    // A name's addresses are tried in turn.
    let mut reached = None;
    for addr in addrs.iter().copied() {
        let upstream = Arc::new(
            Upstream::new(addr, site.route.role, dial_tls.clone(), site.tasks.clone())
                .with_sessions(site.bounds.sessions && site.route.role == Role::Outbound),
        );
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
        role: site.route.role,
        bounds: site.bounds,
        handler: site.handler.clone(),
        lifecycle: site.lifecycle.clone(),
        tasks: site.tasks.clone(),
    };
    let cut = http2::serve(Box::new(io), client, upstream, served).await;
    drop(open);
    // hyper has dropped the stream: it comes back here to be closed, with
    // a lingering close unless its client stopped reading (then a plain
    // close, at once: lingering would hold the slot for it).
    if let Ok(io) = returned.await {
        if cut {
            debug!("connection closed hard");
            return;
        }
        let how = linger::linger(io, LINGER_TIME, LINGER_BYTES).await;
        debug!(?how, "connection closed");
    }
}

/// The TLS handshake of a peer's sidecar on an inbound connection; `None`
/// (counted, logged) if it failed.
async fn accept_peer<H: Handler>(
    tls: &TlsContext,
    stream: preface::Prefixed<TcpStream>,
    site: &Site<H>,
) -> Option<(
    tokio_rustls::server::TlsStream<preface::Prefixed<TcpStream>>,
    PeerIdentity,
)> {
    match tls.accept(stream).await {
        Ok((stream, identity)) => {
            debug!(peer = %identity, "peer authenticated");
            Some((stream, identity))
        }
        Err(err) => {
            site.handler.connections().refused(Refusal::Tls);
            if connection::warn_allowed() {
                warn!(error = %err, "TLS handshake with a peer failed; closing");
            }
            None
        }
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
