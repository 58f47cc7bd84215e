//! The one stream type every connection runs on, and the one way a stream
//! is wrapped.
//!
//! A connection's stream passes through wrappers that each add one thing:
//! `FirstBytes` (first_bytes.rs) tells whether the peer answered,
//! `Prefixed` (preface.rs) hands back the bytes read to recognise the
//! protocol, `Lent` (linger.rs) comes back when dropped. Each is a
//! [`Wrapped`] [`Layer`]: the layer says how to reach the stream inside
//! and, if it needs to, how to read; everything else (all of writing) goes
//! straight to the stream, written here once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Any stream a connection runs on, accepted or dialled: plain TCP, or
/// TLS over it. Boxed, so one code path serves both.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What a [`Wrapped`] stream adds to the stream inside it.
pub trait Layer {
    /// The stream inside.
    type Stream;

    /// The stream inside, to read from or write to; an error if it is gone.
    fn stream(self: Pin<&mut Self>) -> io::Result<Pin<&mut Self::Stream>>;

    /// The stream inside, if it is there.
    fn stream_ref(&self) -> Option<&Self::Stream>;

    /// Reads into `buf`: straight from the stream, unless the layer has
    /// something to do with reads.
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>>
    where
        Self::Stream: AsyncRead,
    {
        self.stream()?.poll_read(cx, buf)
    }
}

pin_project! {
    /// A stream with a [`Layer`] around it: reads go through the layer,
    /// writes straight to the stream inside.
    #[derive(Debug)]
    pub struct Wrapped<L> {
        #[pin]
        layer: L,
    }
}

impl<L> Wrapped<L> {
    /// The stream wrapped in `layer`.
    pub fn wrap(layer: L) -> Wrapped<L> {
        Wrapped { layer }
    }

    /// The layer around the stream.
    pub fn layer(&self) -> &L {
        &self.layer
    }
}

impl<L> AsyncRead for Wrapped<L>
where
    L: Layer,
    L::Stream: AsyncRead,
{
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().layer.poll_read(cx, buf)
    }
}

impl<L> AsyncWrite for Wrapped<L>
where
    L: Layer,
    L::Stream: AsyncWrite,
{
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().layer.stream()?.poll_write(cx, buf)
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().layer.stream()?.poll_write_vectored(cx, bufs)
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.layer
            .stream_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().layer.stream()?.poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().layer.stream()?.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::first_bytes::FirstBytes;
    use crate::linger::lend;
    use crate::preface::Prefixed;
    use crate::test_support::tcp_pair;

    #[tokio::test]
    async fn layers_stack_reads_go_through_each_and_writes_reach_the_stream() {
        let (mut peer, ours) = tcp_pair().await;
        let (stream, answered) = FirstBytes::new(Prefixed::new(b"he".to_vec(), ours));
        let (mut stream, returned) = lend(stream);
        peer.write_all(b"llo").await.expect("write");
        let mut read = [0u8; 5];
        stream.read_exact(&mut read).await.expect("read");
        assert_eq!(&read, b"hello");
        assert!(answered.await.expect("a report"), "data came first");

        assert!(stream.is_write_vectored(), "as TCP is");
        stream.write_all(b"back").await.expect("write");
        let both = [IoSlice::new(b" and"), IoSlice::new(b" forth")];
        assert_eq!(stream.write_vectored(&both).await.expect("write"), 10);
        stream.flush().await.expect("flush");
        stream.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.expect("up to the FIN");
        assert_eq!(&got[..], b"back and forth");

        drop(stream);
        let mut back = returned.await.expect("the stream came back");
        peer.write_all(b"late").await.expect("write");
        drop(peer);
        let mut late = Vec::new();
        back.read_to_end(&mut late).await.expect("read");
        assert_eq!(&late[..], b"late");
    }
}
