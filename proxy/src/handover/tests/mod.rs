//! Both sides of a hand-over in one process, on separate tasks, with real
//! TCP listeners on 127.0.0.1 and the socket in a fresh temporary
//! directory.

mod exchange;
mod protocol;
mod received;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A temporary directory and a socket path in it.
fn socket_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("handover.sock");
    (dir, path)
}

/// A listener on a free port of 127.0.0.1, and its address.
fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("an address");
    (listener, addr)
}

/// Connects to `addr`, accepts on `listener` (made a tokio listener) and
/// checks that bytes go both ways.
async fn serves(listener: TcpListener, addr: SocketAddr) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut accepted, peer) = listener.accept().await.expect("accept");
    assert_eq!(peer, client.local_addr().expect("the client's address"));
    echo(&mut client, &mut accepted).await;
}

/// `client` sends, `server` answers, both checked.
async fn echo(client: &mut tokio::net::TcpStream, server: &mut tokio::net::TcpStream) {
    client.write_all(b"ping").await.expect("client writes");
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.expect("server reads");
    assert_eq!(&got, b"ping");
    server.write_all(b"pong").await.expect("server writes");
    client.read_exact(&mut got).await.expect("client reads");
    assert_eq!(&got, b"pong");
}

/// The path in an error message, as it is written there.
fn shown(path: &Path) -> String {
    path.display().to_string()
}
