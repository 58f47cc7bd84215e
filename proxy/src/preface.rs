//! Waiting for a client to speak before doing anything for it.
//!
//! Every HTTP/2 client opens with the same 24 bytes (RFC 9113, 3.4). A
//! connection is worth an upstream connection, a task and buffers only
//! once they have arrived, and they must arrive within the handshake time:
//! a socket that stays silent is closed having cost one accept. One that
//! says something else is another protocol on an intercepted port, to be
//! forwarded untouched; so is one that says nothing (or only the start of
//! the preface) for the server-first wait, a protocol whose server speaks
//! first, where the caller allows it. The bytes read are handed back
//! in front of the stream ([`Prefixed`]), so hyper (or the forwarded
//! connection's server) reads the connection from its first byte.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::io::{Layer, Wrapped};

/// The HTTP/2 connection preface.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The first byte of a TLS record carrying a handshake (a ClientHello).
pub const TLS_HANDSHAKE: u8 = 0x16;

/// How a connection opened.
#[derive(Debug, Error)]
pub enum PrefaceError {
    /// Nothing (or not enough) arrived in time.
    #[error("no HTTP/2 preface within {0:?}")]
    Timeout(Duration),
    /// The client closed or the read failed.
    #[error("connection ended before its preface: {0}")]
    Io(#[from] io::Error),
}

/// What a connection began with.
pub enum Opening<S> {
    /// The HTTP/2 preface: plaintext h2c.
    Http2(Prefixed<S>),
    /// A TLS handshake record: the caller decides whether it takes TLS.
    Tls(Prefixed<S>),
    /// Something else: another protocol, its first bytes put back.
    Other(Prefixed<S>),
    /// Nothing, or only the start of the preface, for the server-first
    /// wait: a protocol whose server speaks first (the client waits for
    /// its greeting), or one whose opener is a prefix of the preface.
    /// What was read is put back.
    Silent(Prefixed<S>),
}

/// Reads the start of `stream`: the whole HTTP/2 preface, the first byte
/// of a TLS handshake, or up to the first byte that differs from the
/// preface. A client that has not told which by `server_first` (if given
/// and shorter than `handshake`) is [`Opening::Silent`]; without it, one
/// that has not by `handshake` is an error.
pub async fn read_opening<S: AsyncRead + Unpin>(
    mut stream: S,
    handshake: Duration,
    server_first: Option<Duration>,
) -> Result<Opening<S>, PrefaceError> {
    let server_first = server_first.filter(|wait| *wait < handshake);
    let wait = server_first.unwrap_or(handshake);
    let deadline = tokio::time::Instant::now() + wait;
    let mut head = [0u8; PREFACE.len()];
    let mut got = 0;
    while got < PREFACE.len() {
        // A read that times out has consumed nothing: `got` is all there is.
        let read = tokio::time::timeout_at(deadline, stream.read(&mut head[got..])).await;
        let n = match read {
            Err(_) if server_first.is_some() => {
                return Ok(Opening::Silent(Prefixed::new(head[..got].to_vec(), stream)))
            }
            Err(_) => return Err(PrefaceError::Timeout(handshake)),
            Ok(read) => read?,
        };
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        got += n;
        if head[0] == TLS_HANDSHAKE {
            return Ok(Opening::Tls(Prefixed::new(head[..got].to_vec(), stream)));
        }
        // Stop at the first byte that differs: a client that speaks
        // something else is told so without waiting for 24 bytes.
        if head[..got] != PREFACE[..got] {
            return Ok(Opening::Other(Prefixed::new(head[..got].to_vec(), stream)));
        }
    }
    Ok(Opening::Http2(Prefixed::new(head.to_vec(), stream)))
}

/// A stream with bytes already read from it put back in front.
pub type Prefixed<S> = Wrapped<Prefix<S>>;

pin_project! {
    /// What [`Prefixed`] adds to a stream: the bytes to read first.
    pub struct Prefix<S> {
        prefix: Vec<u8>,
        at: usize,
        #[pin]
        inner: S,
    }
}

impl<S> Prefixed<S> {
    /// `inner`, whose reads start with `prefix`.
    pub fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Wrapped::wrap(Prefix {
            prefix,
            at: 0,
            inner,
        })
    }

    /// The stream underneath (its prefix must have been read).
    pub fn get_ref(&self) -> &S {
        &self.layer().inner
    }
}

impl<S> Layer for Prefix<S> {
    type Stream = S;

    #[inline]
    fn stream(self: Pin<&mut Self>) -> io::Result<Pin<&mut S>> {
        Ok(self.project().inner)
    }

    #[inline]
    fn stream_ref(&self) -> Option<&S> {
        Some(&self.inner)
    }

    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>>
    where
        S: AsyncRead,
    {
        let this = self.project();
        if *this.at < this.prefix.len() {
            let rest = &this.prefix[*this.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            *this.at += n;
            if *this.at == this.prefix.len() {
                *this.prefix = Vec::new();
                *this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        this.inner.poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    const WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn the_preface_is_read_and_handed_back() {
        let (client, server) = tokio::io::duplex(256);
        let mut client = client;
        client.write_all(PREFACE).await.unwrap();
        client.write_all(b"SETTINGS").await.unwrap();
        let Opening::Http2(mut stream) = read_opening(server, WAIT, None).await.unwrap() else {
            panic!("not h2");
        };
        let mut all = vec![0u8; PREFACE.len() + 8];
        stream.read_exact(&mut all).await.unwrap();
        assert_eq!(&all[..24], PREFACE);
        assert_eq!(&all[24..], b"SETTINGS");
    }

    #[tokio::test]
    async fn other_protocols_come_back_whole_and_silence_is_refused() {
        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        drop(client);
        let Ok(Opening::Other(mut stream)) = read_opening(server, WAIT, None).await else {
            panic!("HTTP/1.1 taken for HTTP/2 or TLS");
        };
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"GET / HTTP/1.1\r\n\r\n");

        let (_client, server) = tokio::io::duplex(256);
        let err = read_opening(server, Duration::from_millis(50), None)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, PrefaceError::Timeout(_)), "{err}");

        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(&PREFACE[..10]).await.unwrap();
        drop(client);
        let err = read_opening(server, WAIT, None).await.err().unwrap();
        assert!(matches!(err, PrefaceError::Io(_)), "{err}");
    }

    #[tokio::test]
    async fn a_tls_hello_is_recognised_from_its_first_byte() {
        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(&[TLS_HANDSHAKE, 3, 1]).await.unwrap();
        let Opening::Tls(mut stream) = read_opening(server, WAIT, None).await.unwrap() else {
            panic!("not tls");
        };
        let mut first = [0u8; 3];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(first, [TLS_HANDSHAKE, 3, 1]);
    }

    #[tokio::test]
    async fn silence_and_a_preface_prefix_are_server_first_where_allowed() {
        let short = Some(Duration::from_millis(50));
        let (_client, server) = tokio::io::duplex(256);
        let started = tokio::time::Instant::now();
        let Opening::Silent(_) = read_opening(server, WAIT, short).await.unwrap() else {
            panic!("silence is server-first");
        };
        assert!(started.elapsed() < WAIT);

        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(b"P").await.unwrap();
        let Opening::Silent(mut stream) = read_opening(server, WAIT, short).await.unwrap() else {
            panic!("a one-byte opener that could be the preface is server-first");
        };
        client.write_all(b"ING").await.unwrap();
        let mut all = [0u8; 4];
        stream.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, b"PING");

        // A wait as long as the handshake time is no wait: silence is a
        // timeout, as without it.
        let (_client, server) = tokio::io::duplex(256);
        let same = Duration::from_millis(50);
        let err = read_opening(server, same, Some(same)).await.err().unwrap();
        assert!(matches!(err, PrefaceError::Timeout(_)), "{err}");
    }
}
