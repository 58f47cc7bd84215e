//! Closing a connection without losing the end of what was sent on it
//! ("lingering close", as nginx calls it).
//!
//! When a socket is closed while bytes it has not read sit in its receive
//! buffer, or bytes arrive after it was closed, Linux answers with a TCP
//! RST instead of a FIN, and a RST throws away whatever this side had
//! written that is still queued in the kernel. An HTTP/2 client keeps
//! talking while it reads the end of a response (WINDOW_UPDATE, PING and
//! its acks, a request racing a GOAWAY), so closing right after the last
//! frame was written makes a slow reader, TensorFlow on a busy CPU, lose
//! the tail of its last response and see "Connection reset by peer".
//!
//! So a connection is never simply dropped once its HTTP/2 side is done:
//! its stream is given back ([`lend`]), and [`linger`] shuts down the
//! write side (a FIN after the queued bytes), reads and discards whatever
//! the peer still sends until it closes too, and only then closes,
//! for at most [`LINGER_TIME`] and [`LINGER_BYTES`].

use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::io::{Layer, Wrapped};

/// Longest a closing connection waits for its peer to close. A peer that
/// has read everything closes at once when it sees the FIN; this bounds a
/// peer that never does.
pub const LINGER_TIME: Duration = Duration::from_secs(5);

/// Most bytes a closing connection reads (and discards) from its peer
/// before it closes anyway: more than the requests TensorFlow could have
/// in flight when it learnt of the close, few enough to cost little.
pub const LINGER_BYTES: u64 = 16 << 20;

/// How a [`linger`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lingered {
    /// The peer closed its side: the close was clean.
    PeerClosed,
    /// Reading failed (the peer reset the connection, say): nothing more
    /// could be delivered anyway.
    Failed,
    /// The peer kept the connection open for [`LINGER_TIME`].
    TimedOut,
    /// The peer sent more than [`LINGER_BYTES`].
    TooMuch,
}

/// Shuts down the write side of `stream`, then reads and discards until
/// the peer closes, for at most `time` and `bytes`; the stream is closed
/// when this returns.
pub async fn linger<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    time: Duration,
    bytes: u64,
) -> Lingered {
    // One deadline for the shutdown and the reads together, so that
    // `time` bounds the whole linger.
    let drain = async {
        // A second shutdown after hyper's is harmless; one that fails means
        // the connection is gone already, which the read below will tell.
        let _ = stream.shutdown().await;
        let mut scratch = [0u8; 4 << 10];
        let mut read = 0u64;
        loop {
            match stream.read(&mut scratch).await {
                Ok(0) => return Lingered::PeerClosed,
                Ok(n) => {
                    read += n as u64;
                    if read > bytes {
                        return Lingered::TooMuch;
                    }
                }
                Err(_) => return Lingered::Failed,
            }
        }
    };
    tokio::time::timeout(time, drain)
        .await
        .unwrap_or(Lingered::TimedOut)
}

/// A stream lent to a connection that closes it by dropping it (hyper's):
/// when dropped, the stream is handed back through the receiver of
/// [`lend`] instead of being closed, so that its owner can [`linger`].
pub type Lent<S> = Wrapped<Loan<S>>;

/// What [`Lent`] adds to a stream: the way back to its owner.
#[derive(Debug)]
pub struct Loan<S> {
    stream: Option<S>,
    back: Option<oneshot::Sender<S>>,
}

/// Lends `stream`: the receiver gets it back once the [`Lent`] is dropped.
pub fn lend<S>(stream: S) -> (Lent<S>, oneshot::Receiver<S>) {
    let (back, returned) = oneshot::channel();
    let lent = Wrapped::wrap(Loan {
        stream: Some(stream),
        back: Some(back),
    });
    (lent, returned)
}

impl<S> Drop for Loan<S> {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.stream.take(), self.back.take()) {
            // A receiver that is gone lets the stream close here.
            let _ = back.send(stream);
        }
    }
}

impl<S: Unpin> Layer for Loan<S> {
    type Stream = S;

    #[inline]
    fn stream(self: Pin<&mut Self>) -> io::Result<Pin<&mut S>> {
        // The stream sits in an `Option` so that `drop` can move it out,
        // which only an `Unpin` stream allows; only `drop` takes it out.
        self.get_mut()
            .stream
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }

    #[inline]
    fn stream_ref(&self) -> Option<&S> {
        self.stream.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::tcp_pair;

    #[tokio::test]
    async fn a_dropped_loan_comes_back_and_lingers_until_the_peer_closes() {
        let (mut client, server) = tcp_pair().await;
        let (lent, returned) = lend(server);
        drop(lent);
        let server = returned.await.expect("the stream came back");
        // The peer still talks after the close began, then closes.
        let peer = tokio::spawn(async move {
            client
                .write_all(b"late window update")
                .await
                .expect("write");
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.expect("the FIN");
            drop(client);
            rest
        });
        let how = linger(server, Duration::from_secs(5), 1 << 20).await;
        assert_eq!(how, Lingered::PeerClosed);
        assert!(peer.await.expect("peer").is_empty());
    }

    #[tokio::test]
    async fn a_peer_that_never_closes_is_bounded_in_time_and_bytes() {
        let (client, server) = tcp_pair().await;
        let started = std::time::Instant::now();
        let how = linger(server, Duration::from_millis(200), 1 << 20).await;
        assert_eq!(how, Lingered::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(client);

        let (mut client, server) = tcp_pair().await;
        let flood = tokio::spawn(async move {
            let chunk = vec![0u8; 64 << 10];
            while client.write_all(&chunk).await.is_ok() {}
        });
        let how = linger(server, Duration::from_secs(10), 256 << 10).await;
        assert_eq!(how, Lingered::TooMuch);
        flood.await.expect("flood");
    }
}
