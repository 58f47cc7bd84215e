//! A response body whose gRPC messages are compressed or restored one by
//! one as they stream past ([`tlc_wire::hop`] is the format).
//!
//! A message up to [`MAX_MESSAGE`] bytes is gathered whole, then
//! transformed; a larger one is never held: its prefix and bytes stream
//! through as they arrive (the holder never compresses such a message, so
//! a restoring body refuses one marked compressed).
//!
//! A restoring body is what a peer's sidecar decides the size of (a few
//! dozen bytes can declare a MiB): each message is charged to the
//! in-flight budget at the size it declares before it is restored (zstd
//! holds it to that size), waiting while the budget is spent, and the
//! charge travels with the restored bytes until they are written toward
//! TensorFlow. The messages of one answer restore to at most
//! [`HopLimits::max_answer_bytes`]; the next one that would pass it ends
//! the answer with `RESOURCE_EXHAUSTED` instead, after whole messages
//! only. A call is never sent again here: its answer has begun, and
//! TensorFlow's calls (`RunGraph`) are not all safe to run twice.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderValue;
use http_body::{Body, Frame, SizeHint};
use tlc_proxy::body::{BoxError, ProxyBody};
use tlc_proxy::limits::budget::{Charge, ChargePoller};
use tlc_wire::hop::{self, COMPRESSED, MAX_MESSAGE};

use super::{HopCounters, HopLimits, Refusal};

/// Bytes of the gRPC prefix: the flag and the message's length.
const PREFIX_LEN: usize = 5;

/// gRPC's status for a resource the call would exhaust.
const RESOURCE_EXHAUSTED: u16 = 8;

/// Which way a body is transformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compress each message that shrinks (the holder's side).
    Compress,
    /// Restore each compressed message (the requester's side).
    Restore,
}

/// `body` with each message that shrinks compressed, counted in `counters`.
pub fn compress(body: ProxyBody, counters: Arc<HopCounters>) -> ProxyBody {
    transform(body, Mode::Compress, counters, None)
}

/// `body`, an answer from the sidecar at `peer`, with its compressed
/// messages restored within `limits` (the in-flight budget,
/// `max_answer_bytes`), counted in `counters`.
pub fn restore(
    body: ProxyBody,
    counters: Arc<HopCounters>,
    limits: &HopLimits,
    peer: SocketAddr,
) -> ProxyBody {
    transform(body, Mode::Restore, counters, Some((limits, peer)))
}

fn transform(
    body: ProxyBody,
    mode: Mode,
    counters: Arc<HopCounters>,
    restoring: Option<(&HopLimits, SocketAddr)>,
) -> ProxyBody {
    tlc_proxy::body::stream(Messages {
        inner: body,
        mode,
        counters,
        buf: BytesMut::new(),
        passing: 0,
        ended: false,
        trailers: None,
        scratch: Vec::new(),
        poller: restoring.map(|(l, _)| l.budget.poller()),
        restored: 0,
        max_restored: restoring.map_or(0, |(l, _)| l.max_answer_bytes),
        peer: restoring.map(|(_, peer)| peer),
    })
}

/// Why a restoring body stopped.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the peer's sidecar sent a compressed message of {0} bytes, more than it may")]
    TooLarge(usize),
    #[error("a message flagged compressed in an answer that says it is not")]
    Flagged,
    #[error("restoring the peer's compressed message: {0}")]
    Restore(#[from] hop::HopError),
    #[error("the peer's sidecar sent an answer restoring to more than {max} bytes ({restored} so far, the next message {next})")]
    AnswerTooLarge { max: u64, restored: u64, next: u64 },
}

/// Restored bytes and their charge to the in-flight budget, which goes
/// back when the last reference to the bytes drops (once written).
struct Charged {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

struct Messages {
    inner: ProxyBody,
    mode: Mode,
    counters: Arc<HopCounters>,
    /// Bytes read and not yet sent on.
    buf: BytesMut,
    /// Bytes of a large message still to stream through unchanged.
    passing: usize,
    /// The inner body has ended (data and trailers read).
    ended: bool,
    trailers: Option<http::HeaderMap>,
    /// Reused for each compressed message.
    scratch: Vec<u8>,
    /// Charges restored messages to the in-flight budget (restoring only).
    poller: Option<ChargePoller>,
    /// Bytes this answer's messages restored to so far.
    restored: u64,
    /// Most bytes they may restore to.
    max_restored: u64,
    /// The sidecar whose answer this is (restoring only).
    peer: Option<SocketAddr>,
}

impl Messages {
    /// The next whole frame to send, if `buf` holds one; pending while a
    /// message to restore waits for its charge.
    fn next_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, BodyError>> {
        let Some(prefix) = self.buf.get(..PREFIX_LEN) else {
            return Poll::Ready(Ok(None));
        };
        let flag = prefix[0];
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > MAX_MESSAGE {
            if self.mode == Mode::Restore && flag == COMPRESSED {
                return Poll::Ready(Err(BodyError::TooLarge(len)));
            }
            // Streamed through as it arrives, prefix first.
            self.passing = len;
            return Poll::Ready(Ok(Some(self.buf.split_to(PREFIX_LEN).freeze())));
        }
        if self.buf.len() < PREFIX_LEN + len {
            return Poll::Ready(Ok(None));
        }
        if self.mode == Mode::Restore && flag == COMPRESSED {
            return self.restore_next(cx, len).map(|r| r.map(Some));
        }
        let frame = self.buf.split_to(PREFIX_LEN + len).freeze();
        let message = &frame[PREFIX_LEN..];
        if self.mode == Mode::Compress && flag != 0 {
            // TensorFlow flagged a message compressed without saying how:
            // not gRPC, and a reader would try to restore it.
            return Poll::Ready(Err(BodyError::Flagged));
        }
        let transformed = match (self.mode, flag) {
            (Mode::Compress, 0) if hop::compress(message, &mut self.scratch) => {
                self.counters.compressed(message.len(), self.scratch.len());
                framed(COMPRESSED, &self.scratch)
            }
            (Mode::Compress, _) => {
                self.counters.unshrunk(message.len());
                frame
            }
            _ => frame,
        };
        Poll::Ready(Ok(Some(transformed)))
    }

    /// Restores the compressed message of `len` bytes at the head of
    /// `buf`: within the answer's cap, once the budget holds what it
    /// declares.
    fn restore_next(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<Result<Bytes, BodyError>> {
        let message = &self.buf[PREFIX_LEN..PREFIX_LEN + len];
        // No declared size: zstd refuses it below, before allocating.
        let declared = hop::declared_size(message).unwrap_or(0);
        let restored = self.restored.saturating_add(declared);
        if restored > self.max_restored {
            return Poll::Ready(Err(BodyError::AnswerTooLarge {
                max: self.max_restored,
                restored: self.restored,
                next: declared,
            }));
        }
        let wanted = declared.saturating_add(PREFIX_LEN as u64);
        let charge = match self.poller.as_mut() {
            Some(poller) => ready!(poller.poll_charge(cx, wanted)),
            // Only `restore` makes a restoring body, with a poller.
            None => return Poll::Ready(Err(BodyError::Flagged)),
        };
        let frame = self.buf.split_to(PREFIX_LEN + len).freeze();
        let message = &frame[PREFIX_LEN..];
        let data = hop::decompress(message)?;
        if data.len() as u64 != declared {
            // zstd holds a frame to the size it declares: not reached.
            let err = hop::HopError::Corrupt("restored size differs from the declared one".into());
            return Poll::Ready(Err(err.into()));
        }
        self.restored = restored;
        self.counters.restored(data.len(), message.len());
        let bytes = framed(0, &data);
        Poll::Ready(Ok(Bytes::from_owner(Charged {
            bytes,
            _charge: charge,
        })))
    }

    /// Ends the answer with `RESOURCE_EXHAUSTED` in place of the rest:
    /// what was sent is whole messages, and the peer's stream is dropped.
    fn give_up(&mut self, err: &BodyError) {
        self.inner = tlc_proxy::body::empty();
        self.buf.clear();
        self.ended = true;
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from(RESOURCE_EXHAUSTED));
        let message = format!("tlcd: {err}");
        if let Ok(value) = HeaderValue::from_str(&message) {
            trailers.insert("grpc-message", value);
        }
        self.trailers = Some(trailers);
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.passing > 0 && !self.buf.is_empty() {
                let n = self.passing.min(self.buf.len());
                self.passing -= n;
                return Poll::Ready(Some(Ok(Frame::data(self.buf.split_to(n).freeze()))));
            }
            if self.passing == 0 {
                match ready!(self.next_message(cx)) {
                    Ok(Some(frame)) => return Poll::Ready(Some(Ok(Frame::data(frame)))),
                    Ok(None) => {}
                    Err(err @ BodyError::AnswerTooLarge { .. }) => {
                        let peer = self.peer.map(|p| p.to_string()).unwrap_or_default();
                        self.counters.refused(Refusal::AnswerTooLarge, &peer, &err);
                        self.give_up(&err);
                    }
                    Err(err) => {
                        self.counters.failed();
                        return Poll::Ready(Some(Err(Box::new(err))));
                    }
                }
            }
            if self.ended {
                if !self.buf.is_empty() {
                    // Bytes that are no whole message: TensorFlow's own
                    // (a sidecar compresses whole messages only), passed
                    // on as they are both ways.
                    let rest = self.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                return Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if self.passing > 0 && self.buf.is_empty() => {
                        // A large message's bytes: on without a copy.
                        if data.len() <= self.passing {
                            self.passing -= data.len();
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        let head = data.slice(..self.passing);
                        self.buf.extend_from_slice(&data[self.passing..]);
                        self.passing = 0;
                        return Poll::Ready(Some(Ok(Frame::data(head))));
                    }
                    Ok(data) => self.buf.extend_from_slice(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                            self.ended = true;
                        }
                    }
                },
                Some(Err(err)) => return Poll::Ready(Some(Err(err))),
                None => self.ended = true,
            }
        }
    }
}

/// `message` behind a gRPC prefix with `flag`.
fn framed(flag: u8, message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + message.len());
    out.extend_from_slice(&[flag]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

impl Body for Messages {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut().poll_next(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.buf.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // The sizes change: nothing is promised.
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlc_proxy::body::{collect, stream};

    fn grpc(messages: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for m in messages {
            body.push(0);
            body.extend_from_slice(&(m.len() as u32).to_be_bytes());
            body.extend_from_slice(m);
        }
        body
    }

    /// `data` cut into pieces of `piece` bytes, then `trailers`.
    fn chunked(data: &[u8], piece: usize) -> ProxyBody {
        let chunks: Vec<Bytes> = data.chunks(piece).map(Bytes::copy_from_slice).collect();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        tlc_proxy::body::chunks(chunks, Some(trailers))
    }

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 2222))
    }

    fn limits(max_answer_bytes: u64) -> HopLimits {
        HopLimits {
            budget: tlc_proxy::limits::budget::MemoryBudget::new(64 << 20),
            gather: std::time::Duration::from_secs(5),
            max_answer_bytes,
            references_bytes: 1 << 20,
        }
    }

    async fn run_within(
        body: ProxyBody,
        mode: Mode,
        counters: &Arc<HopCounters>,
        limits: &HopLimits,
    ) -> Result<(Vec<u8>, Option<http::HeaderMap>), BoxError> {
        let collected = collect(
            stream(match mode {
                Mode::Compress => compress(body, Arc::clone(counters)),
                Mode::Restore => restore(body, Arc::clone(counters), limits, peer()),
            }),
            usize::MAX,
        )
        .await?;
        Ok((collected.to_bytes().to_vec(), collected.trailers))
    }

    async fn run(
        body: ProxyBody,
        mode: Mode,
        counters: &Arc<HopCounters>,
    ) -> Result<(Vec<u8>, bool), BoxError> {
        let (data, trailers) = run_within(body, mode, counters, &limits(u64::MAX)).await?;
        Ok((data, trailers.is_some()))
    }

    #[test]
    fn the_declared_size_is_zstds() {
        for len in [32usize, 200, 255, 256, 300, 65_535, 65_536, 70_000, 1 << 20] {
            let message: Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
            let mut packed = Vec::new();
            assert!(hop::compress(&message, &mut packed), "{len}");
            assert_eq!(hop::declared_size(&packed), Some(len as u64), "{len}");
        }
        assert_eq!(hop::declared_size(b"not zstd at all"), None);
        assert_eq!(hop::declared_size(&[0x28, 0xB5, 0x2F, 0xFD]), None);
    }

    #[tokio::test]
    async fn an_answer_restores_to_its_cap_and_then_ends_with_a_clean_status() {
        let mut packed = Vec::new();
        assert!(hop::compress(&vec![0u8; 100_000], &mut packed));
        let one = framed(COMPRESSED, &packed);
        let body: Vec<u8> = one.iter().copied().cycle().take(one.len() * 50).collect();
        let counters = Arc::new(HopCounters::default());
        let limits = limits(350_000);
        let (out, trailers) = run_within(chunked(&body, 1000), Mode::Restore, &counters, &limits)
            .await
            .unwrap();
        // Three whole messages, no part of a fourth, then the status.
        assert_eq!(out.len(), 3 * (PREFIX_LEN + 100_000));
        let trailers = trailers.unwrap();
        assert_eq!(trailers["grpc-status"], "8");
        let totals = counters.totals();
        assert_eq!(totals.refused.answer_too_large, 1);
        assert_eq!(totals.restored.raw_bytes, 300_000);
        assert_eq!(limits.budget.in_use_bytes(), 0, "every charge came back");
    }

    #[tokio::test]
    async fn restored_messages_hold_their_charge_until_dropped() {
        let mut packed = Vec::new();
        assert!(hop::compress(&vec![0u8; 100_000], &mut packed));
        let body = framed(COMPRESSED, &packed);
        let counters = Arc::new(HopCounters::default());
        let limits = limits(u64::MAX);
        let mut restoring = restore(chunked(&body, 7), counters, &limits, peer());
        let frame = http_body_util::BodyExt::frame(&mut restoring)
            .await
            .unwrap()
            .unwrap();
        let data = frame.into_data().unwrap();
        assert_eq!(data.len(), PREFIX_LEN + 100_000);
        assert!(limits.budget.in_use_bytes() >= 100_000);
        drop(data);
        assert_eq!(limits.budget.in_use_bytes(), 0);
    }

    #[tokio::test]
    async fn compress_then_restore_gives_the_same_bytes_whatever_the_chunking() {
        let key = b"/job:ps/replica:0/task:0/device:CPU:0;0123456789abcdef;/job:worker/replica:0/task:0/device:CPU:0;edge_7_w/read;0:0".repeat(3);
        let large = vec![3u8; MAX_MESSAGE + 10];
        let small = grpc(&[&key, b"x", &key]);
        let body = grpc(&[&key, b"x", &large, &key]);
        for (body, piece) in [
            (&small, 1),
            (&small, 7),
            (&body, 4096),
            (&body, usize::MAX / 2),
        ] {
            let sent = Arc::new(HopCounters::default());
            let (packed, trailers) = run(chunked(body, piece), Mode::Compress, &sent)
                .await
                .unwrap();
            assert!(trailers);
            assert!(packed.len() < body.len());
            let totals = sent.totals();
            assert_eq!(
                totals.compressed.messages, 2,
                "the large one and the tiny one cross as they are"
            );
            let got = Arc::new(HopCounters::default());
            let (restored, trailers) = run(chunked(&packed, piece), Mode::Restore, &got)
                .await
                .unwrap();
            assert!(trailers);
            assert_eq!(&restored, body, "piece {piece}");
            assert_eq!(got.totals().restored, totals.compressed);
        }
    }

    #[tokio::test]
    async fn a_restoring_body_refuses_what_a_sidecar_never_sends() {
        let counters = Arc::new(HopCounters::default());
        // Marked compressed but larger than any compressed message.
        let mut huge = vec![COMPRESSED];
        huge.extend_from_slice(&((MAX_MESSAGE + 1) as u32).to_be_bytes());
        huge.extend_from_slice(&[0; 64]);
        assert!(run(chunked(&huge, 16), Mode::Restore, &counters)
            .await
            .is_err());
        // Not zstd.
        let mut junk = vec![COMPRESSED, 0, 0, 0, 8];
        junk.extend_from_slice(b"not zstd");
        assert!(run(chunked(&junk, 3), Mode::Restore, &counters)
            .await
            .is_err());
        assert_eq!(counters.totals().failures, 2);
        // A message flagged compressed where the call says none: refused.
        let mut flagged = grpc(&[b"0123456789abcdef0123456789abcdef0123"]);
        flagged[0] = 1;
        assert!(run(chunked(&flagged, 7), Mode::Compress, &counters)
            .await
            .is_err());
        // Bytes that are no whole message are TensorFlow's own: passed on
        // unchanged both ways.
        for mode in [Mode::Compress, Mode::Restore] {
            let cut: &[u8] = &[0, 0, 0, 0, 9, 1, 2];
            let (out, _) = run(chunked(cut, 3), mode, &counters).await.unwrap();
            assert_eq!(out, cut);
            let (out, _) = run(chunked(b"ok", 3), mode, &counters).await.unwrap();
            assert_eq!(out, b"ok");
        }
    }
}
