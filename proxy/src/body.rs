//! The body type the proxy moves: any `http_body::Body` of `Bytes`, boxed,
//! so streamed pass-through bodies and rebuilt ones travel alike.
//!
//! What goes around a body is `http_body_util`'s combinators (`map_err`,
//! boxing) and one wrapper of the proxy's own, `Holding`: a value that
//! keeps something alive exactly as long as it lives. [`holding`] puts it
//! around a body (a call guard, a memory charge); [`charged`] puts it
//! around each chunk it reads (the chunk's charge). [`measured`] counts
//! what a body carries and reports it when the body ends. [`chunks`] is a
//! body of its own, not a wrapper.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use pin_project_lite::pin_project;

use crate::limits::budget::{Charge, ChargePoller, MemoryBudget};

mod prefixed;
pub use prefixed::{failing, prefixed};

/// Any error a body may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request and response the proxy sends.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Boxes a streaming body (for example hyper's `Incoming`) without reading it.
pub fn stream<B>(body: B) -> ProxyBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body holding bytes already in memory.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A body with no data.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body of chunks already in memory, then optional trailers: how a
/// rebuilt gRPC response goes out (prefix, message header, tensor bytes,
/// `grpc-status` trailers) without concatenating the chunks.
pub fn chunks(chunks: Vec<Bytes>, trailers: Option<http::HeaderMap>) -> ProxyBody {
    Chunks {
        chunks: chunks.into_iter(),
        trailers,
        announce_size: true,
    }
    .boxed_unsync()
}

/// [`chunks`] that does not tell its size, so that hyper sends no
/// `content-length` for it: HTTP/2 ends a body with END_STREAM and gRPC
/// needs no length, while `h2` spells a `content-length` out on every call
/// (it never indexes its value). For requests between two sidecars.
pub fn chunks_unsized(chunks: Vec<Bytes>, trailers: Option<http::HeaderMap>) -> ProxyBody {
    Chunks {
        chunks: chunks.into_iter(),
        trailers,
        announce_size: false,
    }
    .boxed_unsync()
}

/// `body`, holding `held` until the body is dropped. With a [`Charge`],
/// the bytes a call charged stay charged until they have left (been handed
/// to the connection, which holds at most a send buffer more per stream);
/// with a call guard, the call counts as in progress until then.
pub fn holding<T: Send + 'static>(body: ProxyBody, held: T) -> ProxyBody {
    Holding {
        value: body,
        _held: held,
    }
    .boxed_unsync()
}

pin_project! {
    /// A value and something kept alive exactly as long as it, dropped
    /// right after it: a body and the call guard or [`Charge`] that lasts
    /// until the body is done ([`holding`]), a chunk and the charge on its
    /// bytes ([`charged`]). The value works as it did: a body gives its
    /// frames, end and size hint, a chunk its bytes.
    struct Holding<V, T> {
        #[pin]
        value: V,
        _held: T,
    }
}

impl<V: http_body::Body, T> http_body::Body for Holding<V, T> {
    type Data = V::Data;
    type Error = V::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<V::Data>, V::Error>>> {
        self.project().value.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.value.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.value.size_hint()
    }
}

/// `body`, streamed as it is, with `ended` called once with the bytes of
/// data it carried when it ends (its last frame read): for timing how
/// fast a streamed answer arrives. A body dropped or failed before its end
/// reports nothing.
pub fn measured<F>(body: ProxyBody, ended: F) -> ProxyBody
where
    F: FnOnce(u64) + Send + 'static,
{
    Measured {
        body,
        bytes: 0,
        ended: Some(ended),
    }
    .boxed_unsync()
}

pin_project! {
    /// A body that counts its data and reports the count at its end.
    struct Measured<B, F> {
        #[pin]
        body: B,
        bytes: u64,
        ended: Option<F>,
    }
}

impl<B: http_body::Body<Data = Bytes>, F: FnOnce(u64)> http_body::Body for Measured<B, F> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = body.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                }
                // hyper stops polling a body that says it has ended.
                if body.is_end_stream() {
                    if let Some(ended) = this.ended.take() {
                        ended(*this.bytes);
                    }
                }
            }
            Poll::Ready(None) => {
                if let Some(ended) = this.ended.take() {
                    ended(*this.bytes);
                }
            }
            Poll::Ready(Some(Err(_))) => *this.ended = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A chunk holding its charge, as the owner of a [`Bytes`] (see [`charged`]).
impl<T> AsRef<[u8]> for Holding<Bytes, T> {
    fn as_ref(&self) -> &[u8] {
        &self.value
    }
}

/// `body`, streamed with each data chunk charged to `budget` from when it
/// is read until the connection has written it (the charge travels inside
/// the chunk, released when the last reference to it drops). Reading waits
/// while the budget is spent, so a client that never reads its responses
/// holds at most the budget, not every response it asked for.
pub fn charged(body: ProxyBody, budget: &MemoryBudget) -> ProxyBody {
    Charging {
        body,
        poller: budget.poller(),
        waiting: None,
    }
    .boxed_unsync()
}

pin_project! {
    /// A body whose data chunks each wait for, and then carry, their charge.
    struct Charging<B> {
        #[pin]
        body: B,
        poller: ChargePoller,
        // A chunk read and waiting for its charge.
        waiting: Option<Bytes>,
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for Charging<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if this.waiting.is_none() {
            match this.body.poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(chunk) => *this.waiting = Some(chunk),
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            }
        }
        let len = this.waiting.as_ref().map_or(0, Bytes::len) as u64;
        match this.poller.poll_charge(cx, len) {
            Poll::Ready(charge) => {
                let bytes = this.waiting.take().unwrap_or_default();
                let chunk = Bytes::from_owner(Holding {
                    value: bytes,
                    _held: charge,
                });
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.body.size_hint();
        let waiting = self.waiting.as_ref().map_or(0, Bytes::len) as u64;
        hint.set_lower(hint.lower().saturating_add(waiting));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(waiting));
        }
        hint
    }
}

/// A body of chunks already in memory, then trailers: a source rather than
/// a wrapper, exact about its size and end (which hyper turns into a
/// `content-length` and an END_STREAM on the last frame), which
/// `http_body_util::StreamBody` is not.
struct Chunks {
    chunks: std::vec::IntoIter<Bytes>,
    trailers: Option<http::HeaderMap>,
    /// Whether to tell the size (not for [`chunks_unsized`]).
    announce_size: bool,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = match self.chunks.by_ref().find(|c| !c.is_empty()) {
            Some(chunk) => Some(Frame::data(chunk)),
            None => self.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.as_slice().iter().all(Bytes::is_empty) && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let data: usize = self.chunks.as_slice().iter().map(Bytes::len).sum();
        let mut hint = SizeHint::new();
        hint.set_lower(data as u64);
        if self.trailers.is_none() && self.announce_size {
            hint.set_upper(data as u64);
        }
        hint
    }
}

/// A body read to its end: its data and its trailers.
#[derive(Debug, Default)]
pub struct Collected {
    /// The data chunks as they arrived.
    pub chunks: Vec<Bytes>,
    /// The trailers, if any.
    pub trailers: Option<http::HeaderMap>,
}

impl Collected {
    /// Total data length.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as one buffer (no copy when it arrived in one chunk).
    pub fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = bytes::BytesMut::with_capacity(self.len());
                many.iter().for_each(|c| all.extend_from_slice(c));
                all.freeze()
            }
        }
    }
}

/// The body was longer than the caller allows.
#[derive(Debug, thiserror::Error)]
#[error("body longer than {limit} bytes")]
pub struct TooLong {
    /// The limit.
    pub limit: usize,
}

/// Reads a body to its end, keeping at most `limit` bytes of data.
pub async fn collect<B>(body: B, limit: usize) -> Result<Collected, BoxError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    collect_charged(body, limit, None).await
}

/// Reads a body to its end, keeping at most `limit` bytes of data, each
/// chunk charged to `charge` before it is kept, waiting up to `wait` for
/// each: a body the in-flight budget cannot hold is an error
/// ([`crate::limits::budget::BudgetError`]), not memory.
pub async fn collect_charged<B>(
    mut body: B,
    limit: usize,
    mut charge: Option<(&mut Charge, Duration)>,
) -> Result<Collected, BoxError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut collected = Collected::default();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Into::into)?;
        match frame.into_data() {
            Ok(chunk) => {
                total += chunk.len();
                if total > limit {
                    return Err(Box::new(TooLong { limit }));
                }
                if let Some((charge, wait)) = charge.as_mut() {
                    charge.grow(chunk.len() as u64, *wait).await?;
                }
                collected.chunks.push(chunk);
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    collected.trailers = Some(trailers);
                }
            }
        }
    }
    Ok(collected)
}

/// A body read as far as the caller wanted to look.
pub enum Peeked {
    /// Read to its end within the limit.
    Whole(Collected),
    /// Longer than the limit: what was read, and the rest still unread.
    Partial(Collected, ProxyBody),
}

impl Peeked {
    /// The whole body again, ready to forward: the chunks read, then the
    /// unread rest streamed.
    pub fn into_body(self) -> ProxyBody {
        match self {
            Peeked::Whole(c) => chunks(c.chunks, c.trailers),
            Peeked::Partial(c, rest) => {
                let head = futures_util::stream::iter(
                    c.chunks
                        .into_iter()
                        .map(|c| Ok::<_, BoxError>(Frame::data(c))),
                );
                let tail = http_body_util::BodyStream::new(rest);
                http_body_util::StreamBody::new(futures_util::StreamExt::chain(head, tail))
                    .boxed_unsync()
            }
        }
    }
}

/// Reads a body to its end if it is at most `limit` bytes; a longer one
/// is handed back with what was read, so it can still be forwarded.
pub async fn peek(body: ProxyBody, limit: usize) -> Result<Peeked, BoxError> {
    peek_charged(body, limit, None).await
}

/// [`peek`], each chunk charged to `charge` first: a body the in-flight
/// budget cannot hold whole is handed back like a long one, to be streamed.
pub async fn peek_charged(
    mut body: ProxyBody,
    limit: usize,
    mut charge: Option<&mut Charge>,
) -> Result<Peeked, BoxError> {
    let mut collected = Collected::default();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(chunk) => {
                total += chunk.len();
                let refused = charge
                    .as_deref_mut()
                    .is_some_and(|c| c.try_grow(chunk.len() as u64).is_err());
                collected.chunks.push(chunk);
                if total > limit || refused {
                    return Ok(Peeked::Partial(collected, body));
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    collected.trailers = Some(trailers);
                }
            }
        }
    }
    Ok(Peeked::Whole(collected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops.
    struct Guard(Arc<AtomicUsize>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn trailers() -> http::HeaderMap {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        trailers
    }

    async fn data(body: &mut ProxyBody) -> Bytes {
        let frame = body.frame().await.expect("a frame").expect("no error");
        frame.into_data().expect("data")
    }

    #[tokio::test]
    async fn a_held_value_lives_exactly_as_long_as_its_body() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let inner = chunks(
            vec![
                Bytes::from_static(b"ab"),
                Bytes::new(),
                Bytes::from_static(b"c"),
            ],
            Some(trailers()),
        );
        let mut body = holding(inner, Guard(Arc::clone(&dropped)));
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().lower(), 3);
        assert_eq!(body.size_hint().upper(), None, "trailers follow");
        assert_eq!(&data(&mut body).await[..], b"ab");
        assert_eq!(&data(&mut body).await[..], b"c");
        let last = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(last.into_trailers().expect("trailers"), trailers());
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "ended, but alive");
        drop(body);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);

        let body = holding(full("abc"), Guard(Arc::clone(&dropped)));
        assert_eq!(body.size_hint().exact(), Some(3));
        let body = holding(empty(), body);
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        drop(body);
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_measured_body_reports_its_bytes_once_at_its_end() {
        let (sender, receiver) = std::sync::mpsc::channel();
        let inner = chunks(
            vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defgh")],
            Some(http::HeaderMap::new()),
        );
        let body = measured(inner, move |bytes| sender.send(bytes).unwrap());
        let collected = collect(body, 1 << 10).await.unwrap();
        assert_eq!(collected.len(), 8);
        assert_eq!(receiver.try_iter().collect::<Vec<_>>(), vec![8]);

        let (sender, receiver) = std::sync::mpsc::channel();
        let body = measured(full("unread"), move |bytes| sender.send(bytes).unwrap());
        drop(body);
        assert!(
            receiver.try_recv().is_err(),
            "a body never read reports nothing"
        );
    }

    #[tokio::test]
    async fn unsized_chunks_tell_no_length_but_their_end() {
        let sized = chunks(vec![Bytes::from_static(b"ab")], None);
        assert_eq!(sized.size_hint().exact(), Some(2));
        let mut body = chunks_unsized(vec![Bytes::from_static(b"ab")], None);
        assert_eq!(body.size_hint().lower(), 2);
        assert_eq!(body.size_hint().upper(), None);
        assert!(!body.is_end_stream());
        assert_eq!(&data(&mut body).await[..], b"ab");
        assert!(body.is_end_stream(), "ends with its last chunk");
    }

    #[tokio::test]
    async fn a_charged_chunk_holds_its_charge_until_its_last_reference_drops() {
        const KIB: u64 = 1024;
        let budget = MemoryBudget::new(8 * KIB);
        let inner = chunks(
            vec![
                Bytes::from(vec![1u8; 3 << 10]),
                Bytes::from(vec![2u8; 5 << 10]),
                Bytes::from(vec![3u8; 1 << 10]),
            ],
            Some(trailers()),
        );
        let mut body = charged(inner, &budget);
        assert_eq!(body.size_hint().lower(), 9 * KIB);
        let first = data(&mut body).await;
        assert_eq!(first.len(), 3 << 10);
        assert_eq!(budget.in_use_bytes(), 3 * KIB);
        let part = first.slice(..1);
        drop(first);
        assert_eq!(budget.in_use_bytes(), 3 * KIB, "a slice still holds it");
        let second = data(&mut body).await;
        assert_eq!(budget.in_use_bytes(), 8 * KIB);

        // The budget is spent: the third chunk is read and waits.
        let third = {
            let reading = data(&mut body);
            tokio::pin!(reading);
            let waited = tokio::time::timeout(Duration::from_millis(50), reading.as_mut());
            assert!(waited.await.is_err(), "waits while the budget is spent");
            drop(second);
            reading.await
        };
        assert_eq!(&third[..], &[3u8; 1 << 10][..]);
        assert_eq!(budget.in_use_bytes(), 4 * KIB);
        drop(part);
        assert_eq!(budget.in_use_bytes(), KIB);

        let last = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(last.into_trailers().expect("trailers"), trailers());
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
        drop(body);
        assert_eq!(budget.in_use_bytes(), KIB, "the chunk, not the body");
        drop(third);
        assert_eq!(budget.in_use_bytes(), 0);
    }
}
