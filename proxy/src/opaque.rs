//! Connections that do not speak HTTP/2, forwarded untouched.
//!
//! A port tlcd intercepts may carry more than TensorFlow's gRPC: a health
//! check over HTTP/1.1, a metrics exporter, another program on a port it
//! should not have been given. Without tlcd those connections reach their
//! server, so with tlcd they must too: closing them would break a workload
//! and show nowhere but in a counter. The bytes already read are sent
//! first, then both directions are copied as they are until each side has
//! closed. A forwarded connection holds its listener's connection slot, so
//! their number stays within `limits.max_connections`.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::lifecycle::Lifecycle;
use crate::tuning;

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
}

/// Bytes copied each way by one forwarded connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// From the client to the server, what was read before included.
    pub to_server: u64,
    /// From the server to the client.
    pub to_client: u64,
}

/// Connects to `addr` and copies bytes both ways between it and `client`
/// until both sides have closed, one side fails, or `lifecycle` closes
/// every connection (the end of a drain). `client` replays the bytes read
/// from it before (a [`crate::preface::Prefixed`] stream).
pub async fn forward<S>(
    mut client: S,
    addr: SocketAddr,
    connect_timeout: Duration,
    lifecycle: &Lifecycle,
) -> Result<io::Result<Copied>, OpaqueError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut server = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Err(_) => {
            return Err(OpaqueError::Timeout {
                addr,
                timeout: connect_timeout,
            })
        }
        Ok(Err(source)) => return Err(OpaqueError::Connect { addr, source }),
        Ok(Ok(server)) => server,
    };
    tuning::tcp(&server);
    let copied = tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut server) => copied,
        () = lifecycle.closed() => Ok((0, 0)),
    };
    Ok(copied.map(|(to_server, to_client)| Copied {
        to_server,
        to_client,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preface::Prefixed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(5);

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
        let forwarding = tokio::spawn(async move { forward(client, addr, WAIT, &lifecycle).await });
        far.write_all(b"TP/1.1\r\n\r\n").await.unwrap();
        far.shutdown().await.unwrap();
        let mut answer = Vec::new();
        far.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(echo.await.unwrap(), b"GET / HTTP/1.1\r\n\r\n");
        let copied = forwarding.await.unwrap().unwrap().unwrap();
        assert_eq!(copied.to_server, 18);
        assert_eq!(copied.to_client, 19);
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_is_an_error() {
        let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = unused.local_addr().unwrap();
        drop(unused);
        let (client, _far) = tokio::io::duplex(64);
        let err = forward(client, addr, WAIT, &Lifecycle::default())
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
        let forwarding = tokio::spawn(async move { forward(client, addr, WAIT, &lifecycle).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        closing.close();
        let ended = tokio::time::timeout(WAIT, forwarding).await;
        assert!(ended.is_ok(), "still copying after close");
    }
}
