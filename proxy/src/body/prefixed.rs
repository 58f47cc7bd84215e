//! Bodies put back together after some of their frames were read ahead:
//! the chunks already read, then the rest of the body (or its error).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;

use super::{BoxError, ProxyBody};

/// `chunks`, then whatever `rest` still holds: a body read ahead and
/// handed on with nothing lost.
pub fn prefixed(chunks: Vec<Bytes>, rest: ProxyBody) -> ProxyBody {
    if chunks.is_empty() {
        return rest;
    }
    Prefixed {
        chunks: chunks.into_iter(),
        rest,
    }
    .boxed_unsync()
}

/// A body that fails with `err` when read.
pub fn failing(err: BoxError) -> ProxyBody {
    Failing(Some(err)).boxed_unsync()
}

struct Prefixed {
    chunks: std::vec::IntoIter<Bytes>,
    rest: ProxyBody,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.chunks.next() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None => Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.len() == 0 && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self.chunks.as_slice().iter().map(|c| c.len() as u64).sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + ahead);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + ahead);
        }
        hint
    }
}

struct Failing(Option<BoxError>);

impl http_body::Body for Failing {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.0.take().map(Err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_read_ahead_come_first() {
        let rest = super::super::full(&b"cd"[..]);
        let body = prefixed(
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
            rest,
        );
        let all = body.collect().await.expect("body").to_bytes();
        assert_eq!(&all[..], b"abcd");
        let failed = prefixed(vec![Bytes::from_static(b"a")], failing("broken".into()));
        assert!(failed.collect().await.is_err());
    }
}
