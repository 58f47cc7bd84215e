//! Socket reads and writes in batches, one system call for many frames.
//!
//! `h2` writes each DATA frame on its own and flushes after each, and
//! reads through an 8 KiB buffer: a 2.4 MB response forwarded to a peer
//! that takes 16 KiB frames cost 146 sends and 290 receives, and on
//! loopback each send also pays for the receiver's side of TCP.
//! [`Batched`] copies what is written into a buffer and sends it when the
//! connection's task has written all it had: the first flush after a write
//! is put off (the task is woken to come back), and the next read, or the
//! next flush with nothing written in between, sends. It reads up to
//! [`READ`] bytes at once and hands them out as asked. A memory copy of a
//! byte costs far less than its share of a system call.
//!
//! What it relies on: `h2` flushes at the end of every turn of its
//! connection and reads at the start of the next one, so bytes wait at
//! most for the turn their task was just woken for. A full buffer and a
//! shutdown send at once.
//!
//! An idle stream holds no buffer, but a few idle streams' buffers are
//! kept for the next stream that needs one ([`spare`]): a sidecar's connection
//! goes idle between a step's calls, and allocating and zeroing 64 and
//! 128 KiB anew for each of its turns cost more CPU than the calls.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held before they are sent whatever the turn: two of
/// loopback's 64 KiB segments.
pub const BATCH: usize = 128 << 10;

/// Bytes read from the socket at once.
pub const READ: usize = 64 << 10;

/// A stream read and written in batches.
#[derive(Debug)]
pub struct Batched<T> {
    inner: T,
    /// Bytes read and not yet handed out: `read[start..end]`. Empty
    /// (no allocation) while the socket has nothing to read.
    read: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes written and not yet sent: `buf[sent..]`.
    buf: Vec<u8>,
    sent: usize,
    /// Something was written since the last flush.
    wrote: bool,
}

impl<T> Batched<T> {
    /// `inner`, read and written in batches.
    pub fn new(inner: T) -> Batched<T> {
        Batched {
            inner,
            read: Box::default(),
            start: 0,
            end: 0,
            buf: Vec::new(),
            sent: 0,
            wrote: false,
        }
    }

    /// Bytes waiting to be sent.
    fn waiting(&self) -> usize {
        self.buf.len() - self.sent
    }
}

impl<T: AsyncWrite + Unpin> Batched<T> {
    /// Sends everything waiting; `Pending` while the stream takes no more.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.sent..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Batched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.waiting() > 0 {
            // A new turn: what the last one wrote goes out first. A stream
            // that takes no more now wakes the task when it does; reading
            // goes on meanwhile, so that two peers each waiting for the
            // other to read cannot lock up.
            if let Poll::Ready(Err(err)) = this.poll_send(cx) {
                return Poll::Ready(Err(err));
            }
        }
        if this.start == this.end {
            if buf.remaining() >= READ {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.read.is_empty() {
                this.read = spare::read_buffer();
            }
            let mut into = ReadBuf::new(&mut this.read);
            match Pin::new(&mut this.inner).poll_read(cx, &mut into) {
                Poll::Ready(Ok(())) => {}
                other => {
                    // Nothing to read for now (or never again): hold no
                    // buffer meanwhile.
                    spare::keep_read(std::mem::take(&mut this.read));
                    return other;
                }
            }
            this.start = 0;
            this.end = into.filled().len();
        }
        let n = buf.remaining().min(this.end - this.start);
        buf.put_slice(&this.read[this.start..this.start + n]);
        this.start += n;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Batched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.waiting() + len > BATCH {
            std::task::ready!(this.poll_send(cx))?;
        }
        if len >= BATCH {
            // As large as a batch on its own: no use copying it.
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        if this.buf.capacity() == 0 {
            this.buf = spare::write_buffer();
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        this.wrote = this.wrote || len > 0;
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        // Slices are copied, not sent one by one: `h2` then hands its
        // frames' payloads over without copying them first.
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if std::mem::take(&mut this.wrote) {
            // More may follow in this turn: put the send off, and come
            // back for it.
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(this.poll_send(cx))?;
        // Quiet: an idle connection holds no buffer.
        spare::keep_write(std::mem::take(&mut this.buf));
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T> Drop for Batched<T> {
    fn drop(&mut self) {
        spare::keep_read(std::mem::take(&mut self.read));
        spare::keep_write(std::mem::take(&mut self.buf));
    }
}

/// Buffers of idle streams, kept for the next busy one.
mod spare {
    use std::sync::Mutex;

    use crate::batched::{BATCH, READ};

    /// Buffers of each kind kept at most, for the whole process: a few
    /// streams turn at once; more would only hold memory (at most
    /// `KEPT * (READ + BATCH)` bytes, 1.5 MiB).
    pub const KEPT: usize = 8;

    static READS: Pool<Box<[u8]>> = Pool::new();
    static WRITES: Pool<Vec<u8>> = Pool::new();

    /// A read buffer of [`READ`] bytes, kept or new.
    pub fn read_buffer() -> Box<[u8]> {
        READS
            .take()
            .unwrap_or_else(|| vec![0; READ].into_boxed_slice())
    }

    /// Keeps `buffer` for the next stream, if it is a read buffer.
    pub fn keep_read(buffer: Box<[u8]>) {
        if buffer.len() == READ {
            READS.keep(buffer);
        }
    }

    /// An empty write buffer with room for a batch, kept or new.
    pub fn write_buffer() -> Vec<u8> {
        WRITES.take().unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Keeps `buffer`, emptied, for the next stream, if it holds a batch
    /// and no more (one a large write grew is let go).
    pub fn keep_write(mut buffer: Vec<u8>) {
        if buffer.capacity() == BATCH {
            buffer.clear();
            WRITES.keep(buffer);
        }
    }

    /// At most [`KEPT`] buffers of one kind.
    pub struct Pool<T>(Mutex<Vec<T>>);

    impl<T> Pool<T> {
        /// An empty pool.
        pub const fn new() -> Pool<T> {
            Pool(Mutex::new(Vec::new()))
        }

        /// A kept buffer, if any.
        pub fn take(&self) -> Option<T> {
            self.0.lock().ok().and_then(|mut kept| kept.pop())
        }

        /// Keeps `buffer` unless [`KEPT`] are kept already.
        pub fn keep(&self, buffer: T) {
            if let Ok(mut kept) = self.0.lock() {
                if kept.len() < KEPT {
                    kept.push(buffer);
                }
            }
        }

        /// How many are kept.
        #[cfg(test)]
        pub fn len(&self) -> usize {
            self.0.lock().map_or(0, |kept| kept.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use crate::test_support::tcp_pair;

    use super::*;

    async fn pair() -> (Batched<TcpStream>, TcpStream) {
        let (ours, peer) = tcp_pair().await;
        (Batched::new(ours), peer)
    }

    /// What `peer` receives within a moment.
    async fn arrived(peer: &mut TcpStream) -> Vec<u8> {
        let mut got = vec![0u8; 4 * BATCH];
        match tokio::time::timeout(Duration::from_millis(100), peer.read(&mut got)).await {
            Ok(read) => got.truncate(read.expect("read")),
            Err(_) => got.clear(),
        }
        got
    }

    #[tokio::test]
    async fn a_turns_writes_leave_in_one_send_once_its_task_comes_back() {
        let (mut ours, mut peer) = pair().await;
        ours.write_all(b"one ").await.expect("write");
        assert!(flush_wakes(&mut ours), "a put-off flush wakes its task");
        ours.write_all(b"two").await.expect("write");
        assert!(flush_wakes(&mut ours), "so does the next one after a write");
        assert!(arrived(&mut peer).await.is_empty(), "nothing sent yet");
        // The next flush with nothing written since sends, in one piece.
        assert!(!flush_wakes(&mut ours));
        assert_eq!(arrived(&mut peer).await, b"one two");
    }

    #[tokio::test]
    async fn a_read_sends_what_the_last_turn_wrote() {
        let (mut ours, mut peer) = pair().await;
        ours.write_all(b"request").await.expect("write");
        ours.flush().await.expect("flush (put off)");
        peer.write_all(b"x").await.expect("write");
        let mut one = [0u8; 1];
        ours.read_exact(&mut one).await.expect("read");
        assert_eq!(arrived(&mut peer).await, b"request");
    }

    #[tokio::test]
    async fn a_full_batch_goes_out_at_once_and_a_large_write_straight() {
        let (mut ours, mut peer) = pair().await;
        let chunk = vec![7u8; BATCH / 2 + 1];
        ours.write_all(&chunk).await.expect("write");
        ours.write_all(&chunk).await.expect("write");
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; chunk.len() * 2 + 3 * BATCH];
            peer.read_exact(&mut got).await.expect("everything arrives");
            got
        });
        // The second chunk did not fit beside the first: the first was sent.
        let large = vec![9u8; 3 * BATCH];
        ours.write_all(&large).await.expect("write");
        ours.shutdown().await.expect("shutdown sends the rest");
        let got = reader.await.expect("reader");
        assert!(got[..BATCH + 2].iter().all(|&b| b == 7));
        assert!(got[BATCH + 2..].iter().all(|&b| b == 9));
    }

    #[tokio::test]
    async fn reads_hand_out_one_large_receive_in_small_pieces_then_the_end() {
        let (mut ours, mut peer) = pair().await;
        let sent: Vec<u8> = (0..3 * READ).map(|i| (i % 251) as u8).collect();
        peer.write_all(&sent).await.expect("write");
        drop(peer);
        let mut got = Vec::new();
        let mut piece = [0u8; 1000];
        loop {
            let n = ours.read(&mut piece).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&piece[..n]);
        }
        assert_eq!(got, sent);
        assert!(ours.read.is_empty() || ours.start == ours.end);
    }

    #[tokio::test]
    async fn an_idle_stream_holds_no_buffers() {
        let (mut ours, mut peer) = pair().await;
        ours.write_all(b"hello").await.expect("write");
        ours.flush().await.expect("flush (put off)");
        ours.flush().await.expect("flush");
        assert_eq!(arrived(&mut peer).await, b"hello");
        assert_eq!(ours.buf.capacity(), 0, "the write buffer is freed");
        peer.write_all(b"hi").await.expect("write");
        let mut two = [0u8; 2];
        ours.read_exact(&mut two).await.expect("read");
        let pending = poll_fn(|cx| {
            let mut more = [0u8; 1];
            let mut buf = ReadBuf::new(&mut more);
            Poll::Ready(Pin::new(&mut ours).poll_read(cx, &mut buf).is_pending())
        })
        .await;
        assert!(pending, "nothing more to read");
        assert!(ours.read.is_empty(), "the read buffer is freed");
    }

    #[test]
    fn a_pool_hands_back_what_it_kept_and_keeps_no_more_than_its_bound() {
        let pool = spare::Pool::new();
        let first = vec![0u8; READ].into_boxed_slice();
        let at = first.as_ptr();
        pool.keep(first);
        assert_eq!(pool.take().map(|b| b.as_ptr()), Some(at), "reused");
        assert!(pool.take().is_none());
        for _ in 0..spare::KEPT + 3 {
            pool.keep(vec![0u8; READ].into_boxed_slice());
        }
        assert_eq!(pool.len(), spare::KEPT);
        // The process's own: a new write buffer has room for one batch;
        // buffers of other sizes are not kept.
        let write = spare::write_buffer();
        assert!(write.is_empty() && write.capacity() == BATCH);
        assert_eq!(spare::read_buffer().len(), READ);
        spare::keep_read(Box::default());
        spare::keep_write(Vec::with_capacity(3 * BATCH));
        assert_ne!(spare::read_buffer().len(), 0);
        assert_eq!(spare::write_buffer().capacity(), BATCH);
    }

    /// Flushes `stream` once (it does not wait on a socket this small);
    /// whether that woke the task.
    fn flush_wakes(stream: &mut Batched<TcpStream>) -> bool {
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let flushed = Pin::new(stream).poll_flush(&mut Context::from_waker(&waker));
        assert!(matches!(flushed, Poll::Ready(Ok(()))), "{flushed:?}");
        flag.0.load(Ordering::SeqCst)
    }
}
