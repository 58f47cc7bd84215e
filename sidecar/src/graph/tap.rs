//! Reading graph registrations on their way through, without holding them
//! up: a request body wrapper that forwards every frame as it comes and
//! hands each complete gRPC message to the [`GraphIndex`].
//!
//! The message is read just before its last frame is passed on, so the
//! index knows a graph's tensors before TensorFlow has the whole request,
//! let alone runs a step of that graph. A message that cannot be read
//! (compressed, too large, not the protobuf it should be) is counted and
//! forgotten; the call itself is never touched.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tracing::debug;

use super::index::GraphIndex;
use tlc_proxy::body::{BoxError, ProxyBody};

/// `RegisterGraph`: a TF1 master registers a partition on a worker.
pub const REGISTER_GRAPH: &str = "/tensorflow.WorkerService/RegisterGraph";
/// `Enqueue`: TF2 queues operations and function registrations remotely.
pub const ENQUEUE: &str = "/tensorflow.eager.EagerService/Enqueue";
/// `StreamingEnqueue`: the same as a bidirectional stream.
pub const STREAMING_ENQUEUE: &str = "/tensorflow.eager.EagerService/StreamingEnqueue";

/// Which message a registration call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// `RegisterGraphRequest`.
    Graph,
    /// `EnqueueRequest`.
    Enqueue,
}

impl Registration {
    /// The registration a gRPC method path carries, if any.
    pub fn of_path(path: &str) -> Option<Registration> {
        match path {
            REGISTER_GRAPH => Some(Registration::Graph),
            ENQUEUE | STREAMING_ENQUEUE => Some(Registration::Enqueue),
            _ => None,
        }
    }
}

/// Splits a byte stream into gRPC messages (5-byte prefix, then the
/// message). Keeps at most `limit` bytes of one message; a longer or
/// compressed message makes it give up on the rest of the stream.
#[derive(Debug)]
pub struct MessageSplitter {
    buffer: BytesMut,
    limit: usize,
    gave_up: Option<&'static str>,
}

impl MessageSplitter {
    /// A splitter for messages of at most `limit` bytes.
    pub fn new(limit: usize) -> MessageSplitter {
        MessageSplitter {
            buffer: BytesMut::new(),
            limit,
            gave_up: None,
        }
    }

    /// Why it stopped reading, if it did.
    pub fn gave_up(&self) -> Option<&'static str> {
        self.gave_up
    }

    /// Takes the next chunk of the stream; calls `message` for every
    /// message it completes.
    pub fn push(&mut self, chunk: &[u8], mut message: impl FnMut(&[u8])) {
        if self.gave_up.is_some() {
            return;
        }
        self.buffer.extend_from_slice(chunk);
        loop {
            if self.buffer.len() < 5 {
                return;
            }
            let flag = self.buffer[0];
            let len = u32::from_be_bytes([
                self.buffer[1],
                self.buffer[2],
                self.buffer[3],
                self.buffer[4],
            ]) as usize;
            let reason = match flag {
                0 if len > self.limit => Some("message too large"),
                0 => None,
                1 => Some("compressed message"),
                _ => Some("not gRPC framing"),
            };
            if let Some(reason) = reason {
                self.gave_up = Some(reason);
                self.buffer = BytesMut::new();
                return;
            }
            if self.buffer.len() < 5 + len {
                // Reserve for the rest of this message now that its length
                // is known and within the limit.
                self.buffer.reserve(5 + len - self.buffer.len());
                return;
            }
            self.buffer.advance(5);
            let body = self.buffer.split_to(len);
            message(&body);
        }
    }
}

/// Something else to do with each registration message (`tlcd --record`
/// keeps them as fixtures).
pub type MessageHook = Box<dyn Fn(Registration, &[u8]) + Send>;

impl Registration {
    /// `register_graph` or `enqueue`, for file names.
    pub fn name(self) -> &'static str {
        match self {
            Registration::Graph => "register_graph",
            Registration::Enqueue => "enqueue",
        }
    }
}

/// Wraps a request body so that `index` reads the registrations in it
/// (and `hook`, if any, sees each message).
pub fn tap(
    body: ProxyBody,
    registration: Registration,
    index: Arc<GraphIndex>,
    limit: usize,
    hook: Option<MessageHook>,
) -> ProxyBody {
    use http_body_util::BodyExt;
    Tap {
        inner: body,
        splitter: MessageSplitter::new(limit),
        registration,
        index,
        hook,
    }
    .boxed_unsync()
}

struct Tap {
    inner: ProxyBody,
    splitter: MessageSplitter,
    registration: Registration,
    index: Arc<GraphIndex>,
    hook: Option<MessageHook>,
}

impl Tap {
    fn read(&mut self, chunk: &Bytes) {
        let index = &self.index;
        let registration = self.registration;
        let had_given_up = self.splitter.gave_up().is_some();
        let hook = &self.hook;
        self.splitter.push(chunk, |message| {
            if let Some(hook) = hook {
                hook(registration, message);
            }
            let learned = match registration {
                Registration::Graph => index.learn_register_graph(message),
                Registration::Enqueue => index.learn_enqueue(message),
            };
            if let Err(err) = learned {
                debug!(error = %err, "graph registration not readable; passed on as it is");
            }
        });
        if let (false, Some(reason)) = (had_given_up, self.splitter.gave_up()) {
            index.counters.unreadable.fetch_add(1, Ordering::Relaxed);
            debug!(reason, "not reading the rest of a graph registration call");
        }
    }
}

impl Body for Tap {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(chunk) = frame.data_ref() {
                let chunk = chunk.clone();
                self.read(&chunk);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn splits_messages_across_any_chunking() {
        let mut stream = framed(b"first message");
        stream.extend(framed(b""));
        stream.extend(framed(&[7u8; 300]));
        for cut in [1, 2, 5, 7, 64, stream.len()] {
            let mut splitter = MessageSplitter::new(1000);
            let mut seen = Vec::new();
            for chunk in stream.chunks(cut) {
                splitter.push(chunk, |m| seen.push(m.to_vec()));
            }
            assert_eq!(seen.len(), 3, "cut {cut}");
            assert_eq!(seen[0], b"first message");
            assert!(seen[1].is_empty());
            assert_eq!(seen[2], vec![7u8; 300]);
        }
    }

    #[test]
    fn gives_up_on_large_compressed_or_bad_frames() {
        for (bytes, reason) in [
            (framed(&[0u8; 2000]), "message too large"),
            (
                [&[1u8][..], &framed(b"x")[1..]].concat(),
                "compressed message",
            ),
            (
                [&[9u8][..], &framed(b"x")[1..]].concat(),
                "not gRPC framing",
            ),
        ] {
            let mut splitter = MessageSplitter::new(1000);
            let mut seen = 0;
            splitter.push(&bytes, |_| seen += 1);
            splitter.push(&framed(b"later"), |_| seen += 1);
            assert_eq!(seen, 0);
            assert_eq!(splitter.gave_up(), Some(reason));
        }
    }
}
