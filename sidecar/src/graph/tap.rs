//! Reading graph registrations on their way through, without holding them
//! up: a request body wrapper that forwards every frame as it comes and
//! hands each complete gRPC message to the [`GraphIndex`].
//!
//! The message is read just before its last frame is passed on, so the
//! index knows a graph's tensors before TensorFlow has the whole request,
//! let alone runs a step of that graph. A message that cannot be read
//! (compressed, too large, not the protobuf it should be) is counted and
//! forgotten; the call itself is never touched.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use tracing::debug;

use super::index::GraphIndex;
use tlc_proxy::body::{BoxError, ProxyBody};
use tlc_proxy::limits::budget::{Charge, MemoryBudget};

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
///
/// What a prefix declares is never reserved: a peer may declare 250 MiB
/// and send six bytes, on as many streams as it likes. The buffer grows
/// with the bytes that arrived (doubling, at most to one whole message),
/// and each growth is charged first to the in-flight memory budget, if
/// the splitter has one; a growth the budget cannot hold makes it give up.
#[derive(Debug)]
pub struct MessageSplitter {
    buffer: Vec<u8>,
    limit: usize,
    gave_up: Option<&'static str>,
    budget: Option<MemoryBudget>,
    /// What `buffer`'s capacity holds of `budget`.
    charge: Option<Charge>,
}

/// Why a splitter gave up for want of memory.
pub const GAVE_UP_MEMORY: &str = "in-flight memory budget spent";
/// Why a tap gave up on a message that took too long to arrive.
pub const GAVE_UP_SLOW: &str = "message slower than limits.gather_seconds";

impl MessageSplitter {
    /// A splitter for messages of at most `limit` bytes.
    pub fn new(limit: usize) -> MessageSplitter {
        MessageSplitter {
            buffer: Vec::new(),
            limit,
            gave_up: None,
            budget: None,
            charge: None,
        }
    }

    /// A splitter for messages of at most `limit` bytes whose buffer is
    /// charged to `budget` while it holds one.
    pub fn charged(limit: usize, budget: MemoryBudget) -> MessageSplitter {
        MessageSplitter {
            charge: Some(budget.empty()),
            budget: Some(budget),
            ..MessageSplitter::new(limit)
        }
    }

    /// Why it stopped reading, if it did.
    pub fn gave_up(&self) -> Option<&'static str> {
        self.gave_up
    }

    /// Bytes of an unfinished message it holds now.
    pub fn held(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes its buffer takes now (what is charged, if anything is).
    pub fn capacity(&self) -> usize {
        self.buffer.capacity()
    }

    /// Stops reading for `reason` and lets go of what it held.
    pub fn give_up(&mut self, reason: &'static str) {
        if self.gave_up.is_none() {
            self.gave_up = Some(reason);
        }
        self.buffer = Vec::new();
        self.charge = None;
    }

    /// Takes the next chunk of the stream; calls `message` for every
    /// message it completes.
    pub fn push(&mut self, chunk: &[u8], mut message: impl FnMut(&[u8])) {
        if self.gave_up.is_some() {
            return;
        }
        if let Err(reason) = self.append(chunk) {
            self.give_up(reason);
            return;
        }
        let mut start = 0;
        loop {
            let rest = &self.buffer[start..];
            if rest.len() < 5 {
                break;
            }
            let flag = rest[0];
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let reason = match flag {
                0 if len > self.limit => Some("message too large"),
                0 => None,
                1 => Some("compressed message"),
                _ => Some("not gRPC framing"),
            };
            if let Some(reason) = reason {
                self.give_up(reason);
                return;
            }
            if rest.len() - 5 < len {
                break;
            }
            message(&rest[5..5 + len]);
            start += 5 + len;
        }
        self.buffer.drain(..start);
        if self.buffer.is_empty() && self.buffer.capacity() > 0 {
            // Between messages: nothing held, nothing charged.
            self.buffer = Vec::new();
            self.charge = self.budget.as_ref().map(MemoryBudget::empty);
        }
    }

    /// Appends `chunk`, growing the buffer by what arrived (amortised) and
    /// never past one whole message of the limit plus this chunk.
    fn append(&mut self, chunk: &[u8]) -> Result<(), &'static str> {
        let needed = self.buffer.len().saturating_add(chunk.len());
        let capacity = self.buffer.capacity();
        if needed > capacity {
            let target = capacity
                .saturating_mul(2)
                .min(self.limit.saturating_add(5))
                .max(needed);
            if let Some(charge) = self.charge.as_mut() {
                let more = target.saturating_sub(capacity) as u64;
                charge.try_grow(more).map_err(|_| GAVE_UP_MEMORY)?;
            }
            self.buffer.reserve_exact(target - self.buffer.len());
        }
        self.buffer.extend_from_slice(chunk);
        Ok(())
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

/// Called once when a tap gives up on a call, with why (the call goes on
/// untouched; its graph is not learned).
pub type GiveUpHook = Box<dyn Fn(&'static str) + Send>;

/// How a tap reads: what bounds it, and who else hears of it.
pub struct TapSettings {
    /// Largest message read.
    pub limit: usize,
    /// How long one message may take to arrive once its first byte has.
    pub gather: Duration,
    /// What the bytes held of an unfinished message are charged to.
    pub budget: MemoryBudget,
    /// Sees each message (`tlcd --record`).
    pub hook: Option<MessageHook>,
    /// Hears when the tap gives up.
    pub gave_up: Option<GiveUpHook>,
}

/// Wraps a request body so that `index` reads the registrations in it
/// (and `settings.hook`, if any, sees each message). The body's frames
/// pass as they come, unchanged and never held back: what the tap cannot
/// hold within `settings` it gives up on, not the call.
pub fn tap(
    body: ProxyBody,
    registration: Registration,
    index: Arc<GraphIndex>,
    settings: TapSettings,
) -> ProxyBody {
    use http_body_util::BodyExt;
    Tap {
        inner: body,
        splitter: MessageSplitter::charged(settings.limit, settings.budget),
        registration,
        index,
        hook: settings.hook,
        gather: settings.gather,
        deadline: None,
        gave_up: settings.gave_up,
    }
    .boxed_unsync()
}

struct Tap {
    inner: ProxyBody,
    splitter: MessageSplitter,
    registration: Registration,
    index: Arc<GraphIndex>,
    hook: Option<MessageHook>,
    gather: Duration,
    /// While part of a message is held: when it must have arrived.
    deadline: Option<Pin<Box<Sleep>>>,
    gave_up: Option<GiveUpHook>,
}

impl Tap {
    fn read(&mut self, chunk: &Bytes) {
        if self.deadline.as_ref().is_some_and(|d| d.is_elapsed()) {
            self.give_up(GAVE_UP_SLOW);
        }
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
            self.gave_up_for(reason);
        }
        match (self.splitter.held(), &self.deadline) {
            (0, _) => self.deadline = None,
            (_, None) => {
                self.deadline = Some(Box::pin(tokio::time::sleep(self.gather)));
            }
            (_, Some(_)) => {}
        }
    }

    /// Gives up reading (the call goes on as it is).
    fn give_up(&mut self, reason: &'static str) {
        if self.splitter.gave_up().is_none() {
            self.splitter.give_up(reason);
            self.gave_up_for(reason);
        }
        self.deadline = None;
    }

    fn gave_up_for(&self, reason: &'static str) {
        self.index
            .counters
            .unreadable
            .fetch_add(1, Ordering::Relaxed);
        debug!(reason, "not reading the rest of a graph registration call");
        if let Some(gave_up) = &self.gave_up {
            gave_up(reason);
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
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(chunk) = frame.data_ref() {
                    let chunk = chunk.clone();
                    self.read(&chunk);
                }
            }
            // Waiting on the sender: a message it left unfinished is let
            // go of when its time is up, whether or not more ever comes.
            Poll::Pending => {
                let late = self
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if late {
                    self.give_up(GAVE_UP_SLOW);
                }
            }
            // The end (or an error): nothing more to read.
            Poll::Ready(_) => {
                self.deadline = None;
                if self.splitter.held() > 0 {
                    self.splitter.give_up("unfinished message");
                }
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

    /// A prefix declaring 250 MiB, then six bytes: the buffer holds what
    /// arrived (11 bytes), not what was declared (the old splitter
    /// reserved 250 MiB at once).
    #[test]
    fn never_reserves_what_a_prefix_declares() {
        let mut prefix = vec![0];
        prefix.extend_from_slice(&(250u32 << 20).to_be_bytes());
        let mut splitter = MessageSplitter::new(256 << 20);
        splitter.push(&prefix, |_| unreachable!());
        splitter.push(b"abcdef", |_| unreachable!());
        assert_eq!(splitter.held(), 11);
        assert!(splitter.capacity() <= 64, "{}", splitter.capacity());
        // Then it grows with what arrives, amortised: doubling at most.
        for _ in 0..1000 {
            splitter.push(&[7u8; 1000], |_| unreachable!());
        }
        assert_eq!(splitter.held(), 1_000_011);
        assert!(
            splitter.capacity() < 2 * 1_000_011,
            "{}",
            splitter.capacity()
        );
        assert_eq!(splitter.gave_up(), None);
    }

    /// What the buffer takes is charged to the budget while it holds part
    /// of a message; past the budget it gives up and lets go of it all.
    #[test]
    fn charges_what_it_holds_and_gives_up_past_the_budget() {
        let budget = MemoryBudget::new(64 << 10);
        let mut splitter = MessageSplitter::charged(1 << 20, budget.clone());
        let message = vec![3u8; 40 << 10];
        let stream = framed(&message);
        splitter.push(&stream[..20 << 10], |_| unreachable!());
        let charged = budget.in_use_bytes();
        assert!(charged >= splitter.capacity() as u64, "{charged}");
        assert!(charged <= 2 * (20 << 10) + 1024, "{charged}");
        let mut seen = 0;
        splitter.push(&stream[20 << 10..], |m| {
            assert_eq!(m, &message[..]);
            seen += 1;
        });
        assert_eq!(seen, 1);
        assert_eq!(budget.in_use_bytes(), 0, "nothing held between messages");
        // Another message, larger than the budget: given up on, freed.
        let large = framed(&vec![1u8; 200 << 10]);
        for chunk in large.chunks(16 << 10) {
            splitter.push(chunk, |_| unreachable!());
        }
        assert_eq!(splitter.gave_up(), Some(GAVE_UP_MEMORY));
        assert_eq!(splitter.capacity(), 0);
        assert_eq!(budget.in_use_bytes(), 0);
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
