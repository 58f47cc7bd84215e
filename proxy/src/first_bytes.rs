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

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::oneshot;

use crate::io::{Layer, Wrapped};

/// A stream that reports the outcome of its first read.
pub type FirstBytes<S> = Wrapped<FirstRead<S>>;

pin_project! {
    /// What [`FirstBytes`] adds to a stream: the report of its first read.
    pub struct FirstRead<S> {
        #[pin]
        inner: S,
        report: Option<oneshot::Sender<bool>>,
    }
}

impl<S> FirstBytes<S> {
    /// Wraps `inner`; the receiver gets `true` when data first arrives,
    /// `false` if the stream ends or fails first.
    pub fn new(inner: S) -> (FirstBytes<S>, oneshot::Receiver<bool>) {
        let (report, outcome) = oneshot::channel();
        let stream = Wrapped::wrap(FirstRead {
            inner,
            report: Some(report),
        });
        (stream, outcome)
    }
}

impl<S> Layer for FirstRead<S> {
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
        let before = buf.filled().len();
        let result = this.inner.poll_read(cx, buf);
        if let Poll::Ready(outcome) = &result {
            if let Some(report) = this.report.take() {
                let got_data = outcome.is_ok() && buf.filled().len() > before;
                // The receiver may have given up waiting; nothing to do then.
                let _ = report.send(got_data);
            }
        }
        result
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
