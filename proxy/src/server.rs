//! The running proxy: binds every listener, serves them, and shuts them
//! down (a drain on SIGTERM, a hand-off to a successor).

use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use std::sync::Arc;

use crate::handler::Handler;
use crate::lifecycle::Lifecycle;
use crate::limits::settings::Limits;
use crate::listener::{self, Listener};
use crate::tls::{TlsContext, TlsSettings};

/// A route's listener could not be opened.
#[derive(Debug, Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    /// The address.
    pub addr: std::net::SocketAddr,
    /// The I/O error.
    pub source: std::io::Error,
}

/// The proxy could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// A listener could not be opened.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// `[tls]` is on and its files cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// What the proxy is configured with: its listeners and their bounds,
/// mutual TLS, and how long a shutdown may take.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Every listening socket and where it forwards.
    pub listeners: Vec<Listener>,
    /// What a client or peer may make the proxy hold.
    pub limits: Limits,
    /// Mutual TLS between sidecars (off by default).
    pub tls: TlsSettings,
    /// How long a shutdown keeps connections TensorFlow still uses.
    pub drain: Duration,
    /// Whether calls to a peer's sidecar share one session per connection
    /// ([`crate::mux`]) where the peer takes one.
    pub sessions: bool,
}

/// The running proxy: one listener per route, each call handed to `H`.
pub struct Proxy<H> {
    lifecycle: Lifecycle,
    tracker: TaskTracker,
    drain: Duration,
    bound: Vec<std::net::SocketAddr>,
    /// Copies of the listening sockets, for a successor to take over.
    sockets: Vec<std::net::TcpListener>,
    handler: Arc<H>,
}

/// How long before the end of a drain the connections still open are
/// closed gracefully, so that calls in progress can finish in time.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How often a drain reports what is still open.
const DRAIN_REPORT: Duration = Duration::from_secs(10);

impl<H: Handler> Proxy<H> {
    /// Binds every route's listener (all or nothing) and starts serving,
    /// with `handler` deciding what happens to each call.
    pub async fn start(settings: &ProxySettings, handler: Arc<H>) -> Result<Proxy<H>, StartError> {
        Proxy::start_with(settings, handler, |_| None).await
    }

    /// [`Proxy::start`], taking a route's listening socket from `inherit`
    /// (a predecessor's, handed over) where it has one for the address.
    pub async fn start_with(
        settings: &ProxySettings,
        handler: Arc<H>,
        mut inherit: impl FnMut(std::net::SocketAddr) -> Option<std::net::TcpListener>,
    ) -> Result<Proxy<H>, StartError> {
        let lifecycle = Lifecycle::default();
        let tracker = TaskTracker::new();
        let mut listeners = Vec::new();
        for route in settings.listeners.iter().cloned() {
            let bind_error = |source| BindError {
                addr: route.listen,
                source,
            };
            let listener = listen(route.listen, inherit(route.listen))
                .await
                .map_err(bind_error)?;
            listeners.push((listener, route));
        }
        let bounds = listener::Bounds {
            sessions: settings.sessions,
            ..listener::Bounds::of(&settings.limits)
        };
        let tls = if settings.tls.enabled() {
            let tls = Arc::new(TlsContext::load(&settings.tls)?);
            tls.clone().spawn_reloader(lifecycle.accepting().clone());
            handler.tls_loaded(&tls);
            Some(tls)
        } else {
            None
        };
        let mut bound = Vec::new();
        let mut sockets = Vec::new();
        for (listener, route) in listeners {
            let local = listener.local_addr().unwrap_or(route.listen);
            bound.push(local);
            // A second descriptor of the same socket: handed to a successor,
            // it keeps the port open with no moment where nobody listens.
            match listener_copy(&listener) {
                Ok(copy) => sockets.push(copy),
                Err(err) => warn!(listen = %local, error = %err,
                    "cannot keep a copy of the listening socket; a take-over will bind anew"),
            }
            let route = Listener {
                listen: local,
                ..route
            };
            tracker.spawn(listener::serve(
                listener,
                route,
                bounds,
                tls.clone(),
                handler.clone(),
                lifecycle.clone(),
                tracker.clone(),
            ));
        }
        Ok(Proxy {
            lifecycle,
            tracker,
            drain: settings.drain,
            bound,
            sockets,
            handler,
        })
    }

    /// The addresses the routes listen on, in route order (useful with port 0).
    pub fn local_addrs(&self) -> &[std::net::SocketAddr] {
        &self.bound
    }

    /// The routes' listening sockets, for a successor to take over.
    pub fn listening_sockets(&self) -> &[std::net::TcpListener] {
        &self.sockets
    }

    /// The shutdown on SIGTERM: stops accepting and keeps every connection
    /// until TensorFlow has ended it (see [`lifecycle`]), for at most the
    /// drain time; what is still open near its end is closed gracefully.
    /// Returns when every connection has ended or the drain time is up.
    pub async fn drain(mut self) {
        self.lifecycle.drain();
        // Free the ports now: a sidecar started after this one binds them.
        self.sockets.clear();
        self.tracker.close();
        let open = self.handler.connections().open_now();
        info!(
            open,
            drain_seconds = self.drain.as_secs(),
            "draining: no new connections; the open ones are kept until TensorFlow closes them"
        );
        let close_at = self.drain.saturating_sub(CLOSE_GRACE.min(self.drain / 2));
        if self.wait_reporting(close_at).await {
            info!("drained: every connection was closed by its task");
            return;
        }
        let open = self.handler.connections().open_now();
        warn!(
            open,
            "drain_seconds is nearly up and TensorFlow still uses its connections: closing them \
             now; TensorFlow will see them fail and rebuild its sessions (a chief without a \
             checkpoint re-initialises its model)"
        );
        self.lifecycle.close();
        self.wait_for_calls(self.drain.saturating_sub(close_at))
            .await;
    }

    /// The shutdown after a successor took the listening sockets over:
    /// every connection is closed gracefully at once; calls in progress
    /// finish (for up to the drain time) and TensorFlow's next calls go to
    /// the successor through the same sockets.
    pub async fn hand_off(self) {
        info!(
            open = self.handler.connections().open_now(),
            "handed over: closing every connection gracefully; new calls go to the successor"
        );
        self.shutdown().await;
    }

    /// Stops accepting and closes every connection gracefully at once:
    /// calls in progress finish, for up to the drain time.
    pub async fn shutdown(mut self) {
        self.lifecycle.close();
        self.sockets.clear();
        self.tracker.close();
        self.wait_for_calls(self.drain).await;
    }

    async fn wait_for_calls(&self, limit: Duration) {
        if self.wait_reporting(limit).await {
            info!("drained");
        } else {
            warn!(
                open = self.handler.connections().open_now(),
                seconds = self.drain.as_secs(),
                "calls still in progress at the end of drain_seconds; exiting"
            );
        }
    }

    /// Waits up to `limit` for every connection to end, logging what is
    /// open every few seconds; whether they all ended.
    async fn wait_reporting(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = (tokio::time::Instant::now() + DRAIN_REPORT).min(deadline);
            if tokio::time::timeout_at(next, self.tracker.wait())
                .await
                .is_ok()
            {
                return true;
            }
            if next >= deadline {
                return false;
            }
            info!(
                open = self.handler.connections().open_now(),
                "still draining: TensorFlow keeps its connections"
            );
        }
    }
}

/// A listener on `addr`: `inherited`, a predecessor's socket for it handed
/// over, if there is one, else a new one.
pub async fn listen(
    addr: std::net::SocketAddr,
    inherited: Option<std::net::TcpListener>,
) -> std::io::Result<TcpListener> {
    match inherited {
        Some(socket) => {
            socket.set_nonblocking(true)?;
            TcpListener::from_std(socket)
        }
        None => TcpListener::bind(addr).await,
    }
}

/// A second descriptor of `listener`'s socket, to hand over.
pub fn listener_copy(listener: &TcpListener) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsFd;
    let fd = listener.as_fd().try_clone_to_owned()?;
    Ok(std::net::TcpListener::from(fd))
}
