//! A response body whose gRPC messages are compressed or restored one by
//! one as they stream past ([`tlc_wire::hop`] is the format).
//!
//! A message up to [`MAX_MESSAGE`] bytes is gathered whole, then
//! transformed; a larger one is never held: its prefix and bytes stream
//! through as they arrive (the holder never compresses such a message, so
//! a restoring body refuses one marked compressed).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tlc_proxy::body::{BoxError, ProxyBody};
use tlc_wire::hop::{self, COMPRESSED, MAX_MESSAGE};

use super::HopCounters;

/// Bytes of the gRPC prefix: the flag and the message's length.
const PREFIX_LEN: usize = 5;

/// Which way a body is transformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compress each message that shrinks (the holder's side).
    Compress,
    /// Restore each compressed message (the requester's side).
    Restore,
}

/// `body` with its messages transformed by `mode`, counted in `counters`.
pub fn transform(body: ProxyBody, mode: Mode, counters: Arc<HopCounters>) -> ProxyBody {
    tlc_proxy::body::stream(Messages {
        inner: body,
        mode,
        counters,
        buf: BytesMut::new(),
        passing: 0,
        ended: false,
        trailers: None,
        scratch: Vec::new(),
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
}

impl Messages {
    /// The next whole frame to send, if `buf` holds one.
    fn next_message(&mut self) -> Result<Option<Bytes>, BodyError> {
        let Some(prefix) = self.buf.get(..PREFIX_LEN) else {
            return Ok(None);
        };
        let flag = prefix[0];
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > MAX_MESSAGE {
            if self.mode == Mode::Restore && flag == COMPRESSED {
                return Err(BodyError::TooLarge(len));
            }
            // Streamed through as it arrives, prefix first.
            self.passing = len;
            return Ok(Some(self.buf.split_to(PREFIX_LEN).freeze()));
        }
        if self.buf.len() < PREFIX_LEN + len {
            return Ok(None);
        }
        let frame = self.buf.split_to(PREFIX_LEN + len).freeze();
        let message = &frame[PREFIX_LEN..];
        if self.mode == Mode::Compress && flag != 0 {
            // TensorFlow flagged a message compressed without saying how:
            // not gRPC, and a reader would try to restore it.
            return Err(BodyError::Flagged);
        }
        let transformed = match (self.mode, flag) {
            (Mode::Compress, 0) if hop::compress(message, &mut self.scratch) => {
                self.counters.compressed(message.len(), self.scratch.len());
                framed(COMPRESSED, &self.scratch)
            }
            (Mode::Restore, COMPRESSED) => {
                let restored = hop::decompress(message)?;
                self.counters.restored(restored.len(), message.len());
                framed(0, &restored)
            }
            _ => frame,
        };
        Ok(Some(transformed))
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.passing > 0 && !self.buf.is_empty() {
                let n = self.passing.min(self.buf.len());
                self.passing -= n;
                return Poll::Ready(Some(Ok(Frame::data(self.buf.split_to(n).freeze()))));
            }
            if self.passing == 0 {
                match self.next_message() {
                    Ok(Some(frame)) => return Poll::Ready(Some(Ok(Frame::data(frame)))),
                    Ok(None) => {}
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

    async fn run(
        body: ProxyBody,
        mode: Mode,
        counters: &Arc<HopCounters>,
    ) -> Result<(Vec<u8>, bool), BoxError> {
        let collected = collect(
            stream(transform(body, mode, Arc::clone(counters))),
            usize::MAX,
        )
        .await?;
        Ok((collected.to_bytes().to_vec(), collected.trailers.is_some()))
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
