//! Helpers the unit tests of several modules share: things to run a
//! stream layer against.

use tokio::net::{TcpListener, TcpStream};

/// Two ends of one loopback TCP connection: the one that dialled, then
/// the one accepted.
pub(crate) async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (client.expect("connect"), accepted.expect("accept").0)
}
