//! The body type the proxy moves: any `http_body::Body` of `Bytes`, boxed,
//! so streamed pass-through bodies and rebuilt ones travel alike.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;

use std::time::Duration;

use crate::limits::budget::{Charge, ChargePoller, MemoryBudget};
use http_body_util::{BodyExt, Empty, Full};

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
    }
    .boxed_unsync()
}

/// `body`, holding `held` until the body is dropped. With a [`Charge`],
/// the bytes a call charged stay charged until they have left (been handed
/// to the connection, which holds at most a send buffer more per stream);
/// with a call guard, the call counts as in progress until then.
pub fn holding<T: Send + 'static>(body: ProxyBody, held: T) -> ProxyBody {
    Holding { body, _held: held }.boxed_unsync()
}

struct Holding<T> {
    body: ProxyBody,
    _held: T,
}

impl<T> Unpin for Holding<T> {}

impl<T> http_body::Body for Holding<T> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// `body`, streamed with each data chunk charged to `budget` from when it
/// is read until the connection has written it (the charge travels inside
/// the chunk, released when the last reference to it drops). Reading waits
/// while the budget is spent, so a client that never reads its responses
/// holds at most the budget, not every response it asked for.
pub fn charged(body: ProxyBody, budget: &MemoryBudget) -> ProxyBody {
    ChargedStream {
        body,
        poller: budget.poller(),
        waiting: None,
    }
    .boxed_unsync()
}

struct ChargedStream {
    body: ProxyBody,
    poller: ChargePoller,
    /// A chunk read and waiting for its charge.
    waiting: Option<Bytes>,
}

/// A chunk and its charge, as the owner of a [`Bytes`].
struct ChargedChunk {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for ChargedChunk {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl http_body::Body for ChargedStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.waiting.is_none() {
            match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(chunk) => this.waiting = Some(chunk),
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            }
        }
        let len = this.waiting.as_ref().map_or(0, Bytes::len) as u64;
        match this.poller.poll_charge(cx, len) {
            Poll::Ready(charge) => {
                let bytes = this.waiting.take().unwrap_or_default();
                let chunk = Bytes::from_owner(ChargedChunk {
                    bytes,
                    _charge: charge,
                });
                Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let mut hint = self.body.size_hint();
        let waiting = self.waiting.as_ref().map_or(0, Bytes::len) as u64;
        hint.set_lower(hint.lower().saturating_add(waiting));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(waiting));
        }
        hint
    }
}

struct Chunks {
    chunks: std::vec::IntoIter<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let frame = match self.chunks.by_ref().find(|c| !c.is_empty()) {
            Some(chunk) => Some(http_body::Frame::data(chunk)),
            None => self.trailers.take().map(http_body::Frame::trailers),
        };
        std::task::Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.as_slice().iter().all(Bytes::is_empty) && self.trailers.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let data: usize = self.chunks.as_slice().iter().map(Bytes::len).sum();
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(data as u64);
        if self.trailers.is_none() {
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
                        .map(|c| Ok::<_, BoxError>(http_body::Frame::data(c))),
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
