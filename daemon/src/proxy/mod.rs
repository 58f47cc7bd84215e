//! HTTP/2 proxying of every gRPC call TensorFlow makes.
//!
//! The path of a call: [`listener`] accepts a connection and serves it as
//! h2c; each call goes through [`forward`] to the route's [`upstream`];
//! [`tuning`] holds the socket and HTTP/2 settings; [`grpc_status`] makes
//! the error responses the proxy itself returns.

pub mod body;
pub mod connection;
pub mod first_bytes;
pub mod forward;
pub mod grpc_status;
pub mod listener;
pub mod preface;
pub mod tuning;
pub mod upstream;

use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use std::sync::Arc;

use crate::config::{Config, Listener};
use crate::sidecar::Sidecar;
use crate::tls::TlsContext;

/// Any stream a connection runs on, accepted or dialled: plain TCP, or
/// TLS over it. Boxed, so one code path serves both.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

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
    /// The configuration's bounds are invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// `[tls]` is on and its files cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// The running proxy: one listener per route.
pub struct Proxy {
    shutdown: CancellationToken,
    tracker: TaskTracker,
    drain: Duration,
    bound: Vec<std::net::SocketAddr>,
}

impl Proxy {
    /// Binds every route's listener (all or nothing) and starts serving,
    /// with `sidecar` deciding what happens to each call.
    pub async fn start(config: &Config, sidecar: Arc<Sidecar>) -> Result<Proxy, StartError> {
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let mut listeners = Vec::new();
        for route in config.listeners() {
            let listener = TcpListener::bind(route.listen)
                .await
                .map_err(|source| BindError {
                    addr: route.listen,
                    source,
                })?;
            listeners.push((listener, route));
        }
        let bounds = listener::Bounds::of(&config.limits.limits()?);
        let tls = if config.tls.enabled() {
            let tls = Arc::new(TlsContext::load(&config.tls)?);
            tls.clone().spawn_reloader(shutdown.clone());
            // A sidecar started by two proxies keeps the first one's.
            let _ = sidecar.tls.set(Arc::clone(&tls));
            Some(tls)
        } else {
            None
        };
        let mut bound = Vec::new();
        for (listener, route) in listeners {
            let local = listener.local_addr().unwrap_or(route.listen);
            bound.push(local);
            let route = Listener {
                listen: local,
                ..route
            };
            tracker.spawn(listener::serve(
                listener,
                route,
                bounds,
                tls.clone(),
                sidecar.clone(),
                shutdown.clone(),
                tracker.clone(),
            ));
        }
        Ok(Proxy {
            shutdown,
            tracker,
            drain: Duration::from_secs(config.drain_seconds),
            bound,
        })
    }

    /// The addresses the routes listen on, in route order (useful with port 0).
    pub fn local_addrs(&self) -> &[std::net::SocketAddr] {
        &self.bound
    }

    /// Stops accepting, lets in-flight calls finish for up to the drain
    /// time, then returns.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(self.drain, self.tracker.wait())
            .await
            .is_err()
        {
            warn!(
                seconds = self.drain.as_secs(),
                "calls still in flight after the drain time"
            );
        } else {
            info!("drained");
        }
    }
}
