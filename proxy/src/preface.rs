//! Waiting for a client to speak before doing anything for it.
//!
//! Every HTTP/2 client opens with the same 24 bytes (RFC 9113, 3.4). A
//! connection is worth an upstream connection, a task and buffers only
//! once they have arrived, and they must arrive within the handshake time:
//! a socket that stays silent is closed having cost one accept. One that
//! says something else is another protocol on an intercepted port, to be
//! forwarded untouched. The bytes read are handed back
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
}

/// Reads the start of `stream` within `timeout`: the whole HTTP/2 preface,
/// the first byte of a TLS handshake, or up to the first byte that differs
/// from the preface.
pub async fn read_opening<S: AsyncRead + Unpin>(
    mut stream: S,
    timeout: Duration,
) -> Result<Opening<S>, PrefaceError> {
    let mut head = [0u8; PREFACE.len()];
    let read = async {
        stream.read_exact(&mut head[..1]).await?;
        if head[0] == TLS_HANDSHAKE {
            return Ok::<usize, io::Error>(1);
        }
        let mut got = 1;
        while got < PREFACE.len() {
            let n = stream.read(&mut head[got..]).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
            // Stop at the first byte that differs: a client that speaks
            // something else is told so without waiting for 24 bytes.
            if head[..got] != PREFACE[..got] {
                return Ok(got);
            }
        }
        Ok(got)
    };
    let got = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| PrefaceError::Timeout(timeout))??;
    let prefix = head[..got].to_vec();
    if prefix.first() == Some(&TLS_HANDSHAKE) {
        return Ok(Opening::Tls(Prefixed::new(prefix, stream)));
    }
    if prefix[..] != PREFACE[..] {
        return Ok(Opening::Other(Prefixed::new(prefix, stream)));
    }
    Ok(Opening::Http2(Prefixed::new(prefix, stream)))
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
        let Opening::Http2(mut stream) = read_opening(server, WAIT).await.unwrap() else {
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
        let Ok(Opening::Other(mut stream)) = read_opening(server, WAIT).await else {
            panic!("HTTP/1.1 taken for HTTP/2 or TLS");
        };
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"GET / HTTP/1.1\r\n\r\n");

        let (_client, server) = tokio::io::duplex(256);
        let err = read_opening(server, Duration::from_millis(50))
            .await
            .err()
            .unwrap();
        assert!(matches!(err, PrefaceError::Timeout(_)), "{err}");

        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(&PREFACE[..10]).await.unwrap();
        drop(client);
        let err = read_opening(server, WAIT).await.err().unwrap();
        assert!(matches!(err, PrefaceError::Io(_)), "{err}");
    }

    #[tokio::test]
    async fn a_tls_hello_is_recognised_from_its_first_byte() {
        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(&[TLS_HANDSHAKE, 3, 1]).await.unwrap();
        let Opening::Tls(mut stream) = read_opening(server, WAIT).await.unwrap() else {
            panic!("not tls");
        };
        let mut first = [0u8; 3];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(first, [TLS_HANDSHAKE, 3, 1]);
    }
}
