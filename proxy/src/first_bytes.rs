//! Knowing that a peer really answers before trusting a connection to it.
//!
//! A TCP connect succeeds as soon as the peer's kernel (or a sidecar in
//! front of the peer) accepts; that says nothing about the HTTP/2 server
//! behind it. Every HTTP/2 server opens with a SETTINGS frame, so the first
//! bytes read from the connection are the proof. [`FirstBytes`] wraps a
//! stream and reports, once, whether its first read brought data or the
//! end of the stream (a reset, a close).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// A stream that reports the outcome of its first read.
pub struct FirstBytes<S> {
    inner: S,
    report: Option<oneshot::Sender<bool>>,
}

impl<S> FirstBytes<S> {
    /// Wraps `inner`; the receiver gets `true` when data first arrives,
    /// `false` if the stream ends or fails first.
    pub fn new(inner: S) -> (FirstBytes<S>, oneshot::Receiver<bool>) {
        let (report, outcome) = oneshot::channel();
        let stream = FirstBytes {
            inner,
            report: Some(report),
        };
        (stream, outcome)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(outcome) = &result {
            if let Some(report) = self.report.take() {
                let got_data = outcome.is_ok() && buf.filled().len() > before;
                // The receiver may have given up waiting; nothing to do then.
                let _ = report.send(got_data);
            }
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reports_data_or_end() {
        let (a, mut b) = tokio::io::duplex(64);
        let (mut wrapped, outcome) = FirstBytes::new(a);
        b.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        wrapped.read_exact(&mut byte).await.unwrap();
        assert!(outcome.await.unwrap());

        let (a, b) = tokio::io::duplex(64);
        let (mut wrapped, outcome) = FirstBytes::new(a);
        drop(b);
        let mut rest = Vec::new();
        wrapped.read_to_end(&mut rest).await.unwrap();
        assert!(!outcome.await.unwrap());
    }
}
