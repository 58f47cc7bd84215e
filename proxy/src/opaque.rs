//! Connections that do not speak HTTP/2, forwarded untouched.
//!
//! A port tlcd intercepts may carry more than TensorFlow's gRPC: a health
//! check over HTTP/1.1, a metrics exporter, another program on a port it
//! should not have been given. Without tlcd those connections reach their
//! server, so with tlcd they must too: closing them would break a workload
//! and show nowhere but in a counter. The bytes already read are sent
//! first, then both directions are copied as they are ([`copy`]), within
//! an idle time and a close time, so that a client that never closes
//! cannot hold its slot forever. Under mutual TLS the connection to the
//! peer's sidecar is TLS like an HTTP/2 one ([`Dial::tls`]): no byte
//! crosses to a peer in the clear.

pub mod copy;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::debug;

use crate::lifecycle::Lifecycle;
use crate::tls::{HandshakeError, TlsContext};
use crate::tuning;
pub use copy::{CopyBounds, Ended};

/// Why a connection could not be forwarded.
#[derive(Debug, Error)]
pub enum OpaqueError {
    /// The server did not accept within the time allowed.
    #[error("cannot connect to {addr} within {timeout:?}")]
    Timeout {
        /// The server's address.
        addr: SocketAddr,
        /// The time allowed.
        timeout: Duration,
    },
    /// The server refused or could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The server's address.
        addr: SocketAddr,
        /// The I/O error.
        source: io::Error,
    },
    /// The mutual TLS handshake with the peer's sidecar failed.
    #[error("TLS with {addr} failed: {source}")]
    Tls {
        /// The peer's address.
        addr: SocketAddr,
        /// What the handshake said.
        source: HandshakeError,
    },
}

/// Bytes copied each way by one forwarded connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// From the client to the server, what was read before included.
    pub to_server: u64,
    /// From the server to the client.
    pub to_client: u64,
}

/// Where and how to reach a forwarded connection's server.
#[derive(Clone)]
pub struct Dial {
    /// The server's address.
    pub addr: SocketAddr,
    /// Time allowed to connect.
    pub timeout: Duration,
    /// Mutual TLS to the peer's sidecar (the outbound side when `[tls]` is
    /// on): its inbound side decrypts and forwards what it finds is not
    /// HTTP/2. `None`: plain TCP.
    pub tls: Option<Arc<TlsContext>>,
}

/// Connects as `dial` says and copies bytes both ways between the server
/// and `client` until both sides have closed, one side fails, a bound of
/// `bounds` is reached, or `lifecycle` closes every connection (the end of
/// a drain). `client` replays the bytes read from it before (a
/// [`crate::preface::Prefixed`] stream).
pub async fn forward<S>(
    mut client: S,
    dial: &Dial,
    bounds: CopyBounds,
    lifecycle: &Lifecycle,
) -> Result<(Ended, Copied), OpaqueError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let addr = dial.addr;
    let connect = tokio::time::timeout(dial.timeout, TcpStream::connect(addr));
    let mut server = match connect.await {
        Err(_) => {
            return Err(OpaqueError::Timeout {
                addr,
                timeout: dial.timeout,
            })
        }
        Ok(Err(source)) => return Err(OpaqueError::Connect { addr, source }),
        Ok(Ok(server)) => server,
    };
    tuning::tcp(&server);
    let Some(tls) = &dial.tls else {
        return Ok(copy::copy(&mut client, &mut server, bounds, lifecycle).await);
    };
    let (mut server, identity) = tls
        .connect(addr, server)
        .await
        .map_err(|source| OpaqueError::Tls { addr, source })?;
    debug!(%addr, peer = %identity, "forwarding inside TLS");
    Ok(copy::copy(&mut client, &mut server, bounds, lifecycle).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preface::Prefixed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(5);
    const BOUNDS: CopyBounds = CopyBounds {
        idle: WAIT,
        close: WAIT,
        first_byte: None,
    };

    fn dial(addr: SocketAddr) -> Dial {
        Dial {
            addr,
            timeout: WAIT,
            tls: None,
        }
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_untouched_read_ones_first() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let (mut socket, _) = server.accept().await.unwrap();
            let mut got = Vec::new();
            socket.read_to_end(&mut got).await.unwrap();
            socket.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            got
        });
        let (client, mut far) = tokio::io::duplex(1024);
        let client = Prefixed::new(b"GET / HT".to_vec(), client);
        let lifecycle = Lifecycle::default();
        let forwarding =
            tokio::spawn(async move { forward(client, &dial(addr), BOUNDS, &lifecycle).await });
        far.write_all(b"TP/1.1\r\n\r\n").await.unwrap();
        far.shutdown().await.unwrap();
        let mut answer = Vec::new();
        far.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(echo.await.unwrap(), b"GET / HTTP/1.1\r\n\r\n");
        let (ended, copied) = forwarding.await.unwrap().unwrap();
        assert!(matches!(ended, Ended::Closed), "{ended:?}");
        assert_eq!(copied.to_server, 18);
        assert_eq!(copied.to_client, 19);
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_is_an_error() {
        let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = unused.local_addr().unwrap();
        drop(unused);
        let (client, _far) = tokio::io::duplex(64);
        let err = forward(client, &dial(addr), BOUNDS, &Lifecycle::default())
            .await
            .err()
            .unwrap();
        assert!(matches!(err, OpaqueError::Connect { .. }), "{err}");
    }

    #[tokio::test]
    async fn closing_ends_a_forwarded_connection() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let _accepting = tokio::spawn(async move {
            let held = server.accept().await;
            tokio::time::sleep(WAIT * 2).await;
            drop(held);
        });
        let (client, _far) = tokio::io::duplex(64);
        let lifecycle = Lifecycle::default();
        let closing = lifecycle.clone();
        let forwarding =
            tokio::spawn(async move { forward(client, &dial(addr), BOUNDS, &lifecycle).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        closing.close();
        let ended = tokio::time::timeout(WAIT, forwarding).await;
        assert!(ended.is_ok(), "still copying after close");
    }
}
