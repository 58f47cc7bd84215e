//! A loopback listener whose every connection runs in a task of its own,
//! all of them ended together: what the emulated network's relays and the
//! tasks' `RecvTensor` servers are made of.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections accepted on a free loopback port, each served by its own
/// task, until [`Accepting::shutdown`].
pub struct Accepting {
    addr: SocketAddr,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Accepting {
    /// Listens on a free loopback port and runs `serve` on each connection
    /// accepted. A connection that fails to be accepted is skipped: the
    /// next may not.
    pub async fn start<F, Fut>(serve: F) -> std::io::Result<Accepting>
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (s, t) = (shutdown.clone(), tracker.clone());
        tracker.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = s.cancelled() => return,
                };
                let Ok((stream, _)) = accepted else { continue };
                let (connection, s) = (serve(stream), s.clone());
                t.spawn(async move {
                    tokio::select! {
                        () = connection => {}
                        () = s.cancelled() => {}
                    }
                });
            }
        });
        Ok(Accepting {
            addr,
            shutdown,
            tracker,
        })
    }

    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes the listener and ends every connection's task.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
