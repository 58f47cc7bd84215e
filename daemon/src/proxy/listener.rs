//! Accepting connections on one route and serving each as HTTP/2.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use super::body;
use super::connection::ConnectionId;
use super::tuning;
use super::upstream::Upstream;
use crate::config::Listener;
use crate::intercept;
use crate::sidecar::Sidecar;

/// Serves one route until `shutdown` is cancelled; every connection is
/// spawned on `tracker` so shutdown can wait for them to drain.
pub async fn serve(
    listener: TcpListener,
    route: Listener,
    sidecar: Arc<Sidecar>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    info!(listen = %route.listen, target = ?route.target, role = ?route.role, "listening");
    while let Some((stream, peer)) = accept(&listener, &shutdown).await {
        let span = tracing::debug_span!("connection", %peer, listen = %route.listen);
        tracker
            .spawn(connection(stream, route, sidecar.clone(), shutdown.clone()).instrument(span));
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

/// One accepted connection: HTTP/2 with prior knowledge (h2c), as TensorFlow speaks it.
async fn connection(
    stream: TcpStream,
    route: Listener,
    sidecar: Arc<Sidecar>,
    shutdown: CancellationToken,
) {
    tuning::tcp(&stream);
    let upstream = match intercept::upstream_of(&stream, route.target) {
        Ok(addr) => Arc::new(Upstream::new(addr)),
        Err(err) => {
            warn!(error = %err, "closing connection");
            return;
        }
    };
    // Reach the upstream before speaking HTTP/2 to the caller. If it is not
    // there (a task not listening yet), the caller must see what it would
    // see without a sidecar, a failed connection, so that gRPC waits and
    // retries; answering its calls with UNAVAILABLE would fail them instead.
    if let Err(err) = upstream.sender().await {
        debug!(error = %err, "upstream not reachable; resetting the connection");
        reset(stream);
        return;
    }
    let role = route.role;
    let id = ConnectionId::next();
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let upstream = upstream.clone();
        let sidecar = sidecar.clone();
        request.extensions_mut().insert(id);
        async move {
            let response = sidecar
                .handle(role, &upstream, request.map(body::stream))
                .await;
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    tuning::server(&mut builder);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
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
fn reset(stream: TcpStream) {
    let socket = socket2::SockRef::from(&stream);
    if let Err(err) = socket.set_linger(Some(std::time::Duration::ZERO)) {
        debug!(error = %err, "cannot set SO_LINGER");
    }
    drop(stream);
}
