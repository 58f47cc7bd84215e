//! Calls between two sidecars carried as frames on one long-lived gRPC
//! stream, so that a call costs a few bytes of framing on the hop instead
//! of an HTTP/2 stream's headers, trailers and frame headers.
//!
//! The sidecar that dials a peer ([`client`]) opens `/tlc.Sidecar/Mux` on
//! the upstream connection once a call needs it; a peer's sidecar that
//! knows the method (the listener's `session.rs`) answers with `tlc-mux: 1` and serves
//! every call that arrives on it as if it had come on a stream of its own,
//! through the same handler. Anyone else (an older sidecar, TensorFlow
//! itself) answers something else, and the connection keeps one stream
//! per call. The bytes are [`frame`]'s; what both ends share, the writer
//! that batches frames and the reader that routes them, is here.
//!
//! Bounds: a request goes over a session only whole and at most
//! [`MAX_REQUEST`] bytes (others take a stream of their own, as do calls
//! past [`MAX_CALLS`] in progress); response data is sent within a window
//! per call ([`WINDOW`], renewed by `Credit` frames as it is read) in
//! chunks of [`CHUNK`], so calls interleave and a reader that stops holds
//! at most a window; what a session's reader holds unread in all is at
//! most [`SESSION_BUFFER`], past which it stops reading the stream and
//! HTTP/2's own flow control holds the peer back.

pub mod client;
pub mod frame;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame as BodyFrame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, Notify};

use crate::body::{BoxError, ProxyBody};
use frame::{Frame, FrameError, Pairs, Tables};

/// The response header by which a peer's sidecar accepts a session.
pub const ACCEPT_HEADER: &str = "tlc-mux";
/// The largest request body sent over a session.
pub const MAX_REQUEST: usize = 64 << 10;
/// Calls in progress on one session at most.
pub const MAX_CALLS: usize = 1024;
/// Response bytes sent for a call before its reader grants more.
pub const WINDOW: u32 = 8 << 20;
/// Data bytes of one frame at most: the grain at which calls interleave.
pub const CHUNK: usize = 64 << 10;
/// Bytes a session's reader holds unread for all its calls at most.
pub const SESSION_BUFFER: usize = 64 << 20;
/// The largest batch the writer builds from frames ready together.
const BATCH: usize = 256 << 10;
/// Frames waiting for the writer at most (data frames; control frames,
/// one per call at most at a time, do not wait).
const QUEUE: usize = 16;

/// What sessions did since the process started, every connection
/// together: read by the metrics endpoint and the admin API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Sessions this sidecar opened to a peer's.
    pub opened: u64,
    /// Peers that answered the opening call without taking a session (or
    /// not in time): their connection keeps a stream per call.
    pub refused: u64,
    /// Sessions a peer's sidecar opened to this one.
    pub served: u64,
    /// Sessions that ended on a broken rule or a broken stream.
    pub broken: u64,
    /// Calls sent over a session.
    pub calls: u64,
    /// Calls a session did not take (not whole, too large, the session
    /// full, going away or refused), sent on a stream of their own.
    pub unsent: u64,
    /// Bytes this sidecar wrote into sessions: framing (gRPC prefixes of
    /// batches, flags, ids, lengths, control frames).
    pub framing_bytes: u64,
    /// The same: header blocks (requests' and responses' heads, tails).
    pub header_bytes: u64,
    /// The same: body bytes.
    pub data_bytes: u64,
}

/// The counters behind [`Totals`], one per field.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) opened: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) served: AtomicU64,
    pub(crate) broken: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) unsent: AtomicU64,
    pub(crate) framing_bytes: AtomicU64,
    pub(crate) header_bytes: AtomicU64,
    pub(crate) data_bytes: AtomicU64,
}

static COUNTERS: Counters = Counters {
    opened: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    served: AtomicU64::new(0),
    broken: AtomicU64::new(0),
    calls: AtomicU64::new(0),
    unsent: AtomicU64::new(0),
    framing_bytes: AtomicU64::new(0),
    header_bytes: AtomicU64::new(0),
    data_bytes: AtomicU64::new(0),
};

pub(crate) fn counters() -> &'static Counters {
    &COUNTERS
}

/// What the process's sessions did so far.
pub fn totals() -> Totals {
    let c = &COUNTERS;
    let read = |n: &AtomicU64| n.load(Ordering::Relaxed);
    Totals {
        opened: read(&c.opened),
        refused: read(&c.refused),
        served: read(&c.served),
        broken: read(&c.broken),
        calls: read(&c.calls),
        unsent: read(&c.unsent),
        framing_bytes: read(&c.framing_bytes),
        header_bytes: read(&c.header_bytes),
        data_bytes: read(&c.data_bytes),
    }
}

pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Reset codes (`Frame::Reset`).
pub mod reset {
    /// The caller cancelled the call.
    pub const CANCEL: u32 = 8;
    /// The server took no part of the call; it may be sent again.
    pub const REFUSED: u32 = 7;
    /// The server failed while answering.
    pub const INTERNAL: u32 = 2;
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The peer's bytes were not frames.
    #[error("the peer's frames: {0}")]
    Frame(#[from] FrameError),
    /// A frame that breaks the session's rules (a call id in use, a part
    /// that cannot follow the last).
    #[error("the peer broke the session's rules: {0}")]
    Protocol(&'static str),
    /// The stream under the session failed.
    #[error("the session's stream: {0}")]
    Stream(String),
}

/// Where frames go to be written: control frames (credits, resets) never
/// wait behind data.
#[derive(Clone)]
pub(crate) struct Outgoing {
    control: mpsc::UnboundedSender<Control>,
    data: mpsc::Sender<Frame>,
}

impl Outgoing {
    /// Queues a control frame; false if the session's writer is gone.
    pub(crate) fn control(&self, frame: Frame) -> bool {
        self.control.send(Control::Frame(frame)).is_ok()
    }

    /// Ends the stream once what is queued now is written, whoever still
    /// holds a queue.
    pub(crate) fn finish(&self) {
        let _ = self.control.send(Control::Finish);
    }

    /// Queues a call's frame behind the others; false if the writer is gone.
    pub(crate) async fn data(&self, frame: Frame) -> bool {
        self.data.send(frame).await.is_ok()
    }
}

/// A new writer: its queues, and the body that carries its batches as
/// gRPC messages, ending with `trailers` once every [`Outgoing`] is gone
/// or [`Outgoing::finish`] was called.
pub(crate) fn writer(trailers: Option<HeaderMap>) -> (Outgoing, ProxyBody) {
    let (control, control_rx) = mpsc::unbounded_channel();
    let (data, data_rx) = mpsc::channel(QUEUE);
    let body = Batches {
        control: control_rx,
        data: data_rx,
        tables: Tables::default(),
        trailers,
        control_closed: false,
        finishing: false,
        done: false,
    };
    (Outgoing { control, data }, body.boxed_unsync())
}

/// What the control queue carries.
enum Control {
    Frame(Frame),
    Finish,
}

/// The session stream's body: each time HTTP/2 can send more, the frames
/// queued by then are written as one batch. Written when polled, in the
/// connection's own task, so that a frame costs no hand-over to a task
/// of the session's.
struct Batches {
    control: mpsc::UnboundedReceiver<Control>,
    data: mpsc::Receiver<Frame>,
    tables: Tables,
    trailers: Option<HeaderMap>,
    control_closed: bool,
    /// `Finish` was read: the batch being written is the last.
    finishing: bool,
    done: bool,
}

impl Batches {
    fn end(&mut self) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        self.done = true;
        Poll::Ready(self.trailers.take().map(|t| Ok(BodyFrame::trailers(t))))
    }

    /// The next frame ready now: control frames first.
    fn next_ready(&mut self) -> Option<Frame> {
        if !self.control_closed {
            match self.control.try_recv() {
                Ok(Control::Frame(frame)) => return Some(frame),
                Ok(Control::Finish) => {
                    self.finishing = true;
                    return None;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => self.control_closed = true,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
        }
        self.data.try_recv().ok()
    }

    /// The first frame of a batch, or why there is none.
    fn poll_first(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        if !self.control_closed {
            match self.control.poll_recv(cx) {
                Poll::Ready(Some(Control::Frame(frame))) => return Poll::Ready(Some(frame)),
                Poll::Ready(Some(Control::Finish)) => return Poll::Ready(None),
                Poll::Ready(None) => self.control_closed = true,
                Poll::Pending => {}
            }
        }
        match self.data.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame)),
            Poll::Ready(None) if self.control_closed => Poll::Ready(None),
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Body for Batches {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.finishing {
            return self.end();
        }
        let first = match self.poll_first(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return self.end(),
            Poll::Ready(Some(frame)) => frame,
        };
        let this = &mut *self;
        let mut batch = BytesMut::with_capacity(frame::GRPC_PREFIX + 256);
        batch.put_slice(&[0; frame::GRPC_PREFIX]);
        let mut written = this.tables.write(&first, &mut batch);
        // Whatever else is ready goes in the same message.
        while batch.len() < BATCH {
            let Some(next) = this.next_ready() else {
                break;
            };
            let more = this.tables.write(&next, &mut batch);
            written.headers += more.headers;
            written.data += more.data;
        }
        let counters = counters();
        let framing = batch.len() - written.headers - written.data;
        counters
            .framing_bytes
            .fetch_add(framing as u64, Ordering::Relaxed);
        counters
            .header_bytes
            .fetch_add(written.headers as u64, Ordering::Relaxed);
        counters
            .data_bytes
            .fetch_add(written.data as u64, Ordering::Relaxed);
        let len = batch.len() - frame::GRPC_PREFIX;
        batch[..frame::GRPC_PREFIX].copy_from_slice(&frame::batch_prefix(len));
        Poll::Ready(Some(Ok(BodyFrame::data(batch.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Bytes a session's reader has handed to calls and their readers have
/// not read yet; see [`SESSION_BUFFER`].
#[derive(Debug, Default)]
pub(crate) struct Unread {
    bytes: AtomicUsize,
    read: Notify,
}

impl Unread {
    pub(crate) fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::SeqCst);
    }

    pub(crate) fn consumed(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::SeqCst);
        self.read.notify_waiters();
    }

    async fn below_bound(&self) {
        loop {
            let notified = self.read.notified();
            if self.bytes.load(Ordering::SeqCst) < SESSION_BUFFER {
                return;
            }
            notified.await;
        }
    }
}

/// Reads `stream`'s batches and hands each frame to `route` in order,
/// until the stream ends (`Ok`) or breaks, or `route` refuses a frame.
pub(crate) async fn read_frames<F>(
    mut stream: ProxyBody,
    unread: &Arc<Unread>,
    mut route: F,
) -> Result<(), SessionError>
where
    F: FnMut(Frame) -> Result<(), SessionError>,
{
    let mut tables = Tables::default();
    let mut pending = BytesMut::new();
    loop {
        unread.below_bound().await;
        let Some(next) = stream.frame().await else {
            return Ok(());
        };
        let next = next.map_err(|e| SessionError::Stream(e.to_string()))?;
        let Ok(mut chunk) = next.into_data() else {
            continue; // trailers: the end follows
        };
        // A batch that is whole in its chunk (the usual case: one batch
        // per HTTP/2 DATA frame) is read where it lies, without a copy.
        if pending.is_empty() {
            while let Some(batch) = frame::take_batch(&mut chunk)? {
                read_batch(&mut tables, batch, &mut route)?;
            }
        }
        pending.extend_from_slice(&chunk);
        while let Some(batch) = frame::next_batch(&mut pending)? {
            read_batch(&mut tables, batch, &mut route)?;
        }
    }
}

/// Batches above this size are not kept whole for a small part of them.
const COMPACT_ABOVE: usize = 64 << 10;

fn read_batch<F>(tables: &mut Tables, mut batch: Bytes, route: &mut F) -> Result<(), SessionError>
where
    F: FnMut(Frame) -> Result<(), SessionError>,
{
    let whole = batch.len();
    while !batch.is_empty() {
        let mut frame = tables.read(&mut batch)?;
        if let (Frame::Call(_, part), true) = (&mut frame, whole > COMPACT_ABOVE) {
            own_small_pieces(part, whole);
        }
        route(frame)?;
    }
    Ok(())
}

/// Copies out of a large batch what is small in it: header pairs, and
/// data under half the batch. A call's pieces are slices of the batch
/// they came in, and a slice keeps the whole batch (up to
/// [`frame::MAX_BATCH`]) for as long as the call holds it: a few bytes of
/// headers must not hold a MiB through a long call.
fn own_small_pieces(part: &mut frame::Part, whole: usize) {
    for pairs in [&mut part.head, &mut part.tail].into_iter().flatten() {
        for (name, value) in pairs.iter_mut() {
            *name = frame::owned(name);
            *value = frame::owned(value);
        }
    }
    if let Some(data) = part.data.as_mut().filter(|d| d.len() * 2 <= whole) {
        *data = frame::owned(data);
    }
}

/// Says that a session broke: at most one line a second for the process
/// (a peer that breaks every session must not fill the log); its calls in
/// progress failed, and later calls take streams until a new session.
pub(crate) fn warn_broken(err: &SessionError) {
    if crate::connection::warn_allowed() {
        tracing::warn!(error = %err, "a session with a peer's sidecar broke; its calls in progress failed");
    }
}

/// Headers that belong to one HTTP/2 hop, never carried in a frame.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

/// `headers` as a frame's pairs, after `first` (pseudo-headers). Their
/// bytes are copied into one buffer that the pairs share, not into two
/// allocations a header: this runs for every call a session carries.
pub(crate) fn to_pairs(first: Pairs, headers: &HeaderMap) -> Pairs {
    let carried = || headers.iter().filter(|(name, _)| !hop_by_hop(name));
    let size = carried().map(|(n, v)| n.as_str().len() + v.len()).sum();
    let mut all = BytesMut::with_capacity(size);
    for (name, value) in carried() {
        all.extend_from_slice(name.as_str().as_bytes());
        all.extend_from_slice(value.as_bytes());
    }
    let all = all.freeze();
    let mut pairs = first;
    pairs.reserve(headers.len());
    let mut at = 0;
    for (name, value) in carried() {
        let (name_end, end) = (
            at + name.as_str().len(),
            at + name.as_str().len() + value.len(),
        );
        pairs.push((all.slice(at..name_end), all.slice(name_end..end)));
        at = end;
    }
    pairs
}

/// A frame's pairs as headers; pseudo-headers (`:path`...) are handed to
/// `pseudo` instead.
pub(crate) fn from_pairs(
    pairs: Pairs,
    mut pseudo: impl FnMut(&[u8], Bytes) -> Result<(), SessionError>,
) -> Result<HeaderMap, SessionError> {
    let mut headers = HeaderMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        if name.first() == Some(&b':') {
            pseudo(&name, value)?;
            continue;
        }
        let name = HeaderName::from_bytes(&name)
            .map_err(|_| SessionError::Protocol("a header name that is not one"))?;
        if hop_by_hop(&name) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(value)
            .map_err(|_| SessionError::Protocol("a header value that is not one"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// The bytes of a body that is all there now and at most `limit` long,
/// with its trailers; else the body back as it was, nothing lost.
pub(crate) fn ready_whole(
    mut body: ProxyBody,
    limit: usize,
) -> Result<(Bytes, Option<HeaderMap>), ProxyBody> {
    use futures_util::FutureExt;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0;
    loop {
        match body.frame().now_or_never() {
            Some(None) => break,
            Some(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    len += data.len();
                    chunks.push(data);
                    if len > limit {
                        return Err(crate::body::prefixed(chunks, body));
                    }
                }
                // Trailers end a body.
                Err(frame) => return Ok((concat(chunks, len), frame.into_trailers().ok())),
            },
            Some(Some(Err(err))) => {
                return Err(crate::body::prefixed(chunks, crate::body::failing(err)))
            }
            None => return Err(crate::body::prefixed(chunks, body)),
        }
    }
    Ok((concat(chunks, len), None))
}

fn concat(chunks: Vec<Bytes>, len: usize) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(len);
            for chunk in chunks {
                all.put_slice(&chunk);
            }
            all.freeze()
        }
    }
}

#[cfg(test)]
mod tests;
