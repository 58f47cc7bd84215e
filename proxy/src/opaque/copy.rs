//! Copying both ways between a forwarded connection's client and server,
//! within time bounds.
//!
//! `tokio::io::copy_bidirectional` copies until both sides have closed,
//! however long that takes: a client that sends two bytes and never closes
//! holds its connection (and its listener's slot) forever, even after the
//! server closed. Here both directions share one clock instead: no byte
//! either way for the idle time, or, once one side has closed, no byte for
//! the close time, and the connection is closed; a client that has sent
//! nothing at all by its first-byte deadline is closed too. One buffer per
//! direction, and one timer, reset only when it fires.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::Copied;
use crate::lifecycle::Lifecycle;

/// Bytes buffered per direction: enough for a health check or a metrics
/// scrape in one read, small enough for many idle connections.
const BUFFER: usize = 16 << 10;

/// How long a forwarded connection may wait.
#[derive(Debug, Clone, Copy)]
pub struct CopyBounds {
    /// No byte either way for this long: closed.
    pub idle: Duration,
    /// Once one side has closed, no byte for this long: closed.
    pub close: Duration,
    /// The client must have sent a byte within this time (counted from
    /// the start of the copy); `None`: no such deadline.
    pub first_byte: Option<Duration>,
}

/// How a forwarded connection ended.
#[derive(Debug)]
pub enum Ended {
    /// Both sides closed.
    Closed,
    /// No byte either way for [`CopyBounds::idle`].
    Idle,
    /// One side closed, and the other passed no byte for
    /// [`CopyBounds::close`] after.
    HalfClosed,
    /// The client sent nothing by [`CopyBounds::first_byte`].
    NoFirstByte,
    /// The proxy closed every connection (the end of a drain).
    Shutdown,
    /// A read or write failed.
    Failed(io::Error),
}

/// One direction: read from one side into the buffer, write it to the
/// other; at the reader's end, shut the writer down (a half-close passed on).
struct Direction {
    buf: Box<[u8]>,
    pos: usize,
    filled: usize,
    read_done: bool,
    done: bool,
    moved: u64,
    progressed: bool,
}

impl Direction {
    fn new() -> Direction {
        Direction {
            buf: vec![0; BUFFER].into_boxed_slice(),
            pos: 0,
            filled: 0,
            read_done: false,
            done: false,
            moved: 0,
            progressed: false,
        }
    }

    /// Copies until the reader would block (`Pending`) or has ended and
    /// the writer is shut down (`Ready(Ok)`).
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        mut writer: Pin<&mut W>,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            while self.pos < self.filled {
                let n = ready!(writer
                    .as_mut()
                    .poll_write(cx, &self.buf[self.pos..self.filled]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.progressed = true;
            }
            if self.read_done {
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut self.buf);
            if reader.as_mut().poll_read(cx, &mut read)?.is_pending() {
                // Nothing more to send for now: what a TLS writer holds
                // must go out before waiting.
                ready!(writer.as_mut().poll_flush(cx))?;
                return Poll::Pending;
            }
            let n = read.filled().len();
            self.pos = 0;
            self.filled = n;
            if n == 0 {
                self.read_done = true;
            } else {
                self.moved += n as u64;
                self.progressed = true;
            }
        }
    }

    fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progressed)
    }
}

/// Copies both ways between `client` and `server` until both have closed,
/// a bound in `bounds` is reached, or `lifecycle` closes every connection.
/// Each side's end is passed on to the other (`shutdown`), so that a
/// request-then-close client still gets its answer.
pub async fn copy<C, S>(
    client: &mut C,
    server: &mut S,
    bounds: CopyBounds,
    lifecycle: &Lifecycle,
) -> (Ended, Copied)
where
    C: AsyncRead + AsyncWrite + Unpin + ?Sized,
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let started = Instant::now();
    let mut up = Direction::new();
    let mut down = Direction::new();
    let ended = {
        let mut last = started;
        let mut half_closed = false;
        let closed = lifecycle.closed();
        tokio::pin!(closed);
        let timer = tokio::time::sleep_until(started + bounds.idle);
        tokio::pin!(timer);
        std::future::poll_fn(|cx| {
            if closed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ended::Shutdown);
            }
            let to_server = up.poll_copy(cx, Pin::new(&mut *client), Pin::new(&mut *server));
            let to_client = down.poll_copy(cx, Pin::new(&mut *server), Pin::new(&mut *client));
            if up.take_progress() | down.take_progress() {
                last = Instant::now();
            }
            match (to_server, to_client) {
                (Poll::Ready(Err(err)), _) | (_, Poll::Ready(Err(err))) => {
                    return Poll::Ready(Ended::Failed(err))
                }
                (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => return Poll::Ready(Ended::Closed),
                (Poll::Ready(Ok(())), _) | (_, Poll::Ready(Ok(()))) => half_closed = true,
                _ => {}
            }
            loop {
                let (deadline, why) = deadline(started, last, half_closed, up.moved, bounds);
                if Instant::now() >= deadline {
                    return Poll::Ready(why);
                }
                // Activity only moves the deadline later: the timer is
                // left to fire and set again then, not reset at each read.
                if deadline < timer.deadline() || timer.is_elapsed() {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        })
        .await
    };
    let copied = Copied {
        to_server: up.moved,
        to_client: down.moved,
    };
    (ended, copied)
}

/// When the connection is to be closed if nothing moves, and why.
fn deadline(
    started: Instant,
    last: Instant,
    half_closed: bool,
    from_client: u64,
    bounds: CopyBounds,
) -> (Instant, Ended) {
    let mut next = if half_closed {
        (last + bounds.close, Ended::HalfClosed)
    } else {
        (last + bounds.idle, Ended::Idle)
    };
    if let (0, Some(first)) = (from_client, bounds.first_byte) {
        if started + first < next.0 {
            next = (started + first, Ended::NoFirstByte);
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const SHORT: Duration = Duration::from_millis(100);
    const LONG: Duration = Duration::from_secs(30);

    fn bounds(idle: Duration, close: Duration, first_byte: Option<Duration>) -> CopyBounds {
        CopyBounds {
            idle,
            close,
            first_byte,
        }
    }

    #[tokio::test]
    async fn both_ways_and_each_end_passed_on() {
        let (mut client, mut client_far) = tokio::io::duplex(64);
        let (mut server, mut server_far) = tokio::io::duplex(64);
        let copying = tokio::spawn(async move {
            let lifecycle = Lifecycle::default();
            copy(
                &mut client,
                &mut server,
                bounds(LONG, LONG, None),
                &lifecycle,
            )
            .await
        });
        client_far.write_all(b"ping").await.unwrap();
        client_far.shutdown().await.unwrap();
        let mut got = Vec::new();
        server_far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ping", "the client's end reached the server");
        server_far.write_all(b"pong").await.unwrap();
        drop(server_far);
        let mut answer = Vec::new();
        client_far.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"pong");
        let (ended, copied) = copying.await.unwrap();
        assert!(matches!(ended, Ended::Closed), "{ended:?}");
        assert_eq!((copied.to_server, copied.to_client), (4, 4));
    }

    #[tokio::test]
    async fn silence_either_way_ends_it() {
        let (mut client, mut client_far) = tokio::io::duplex(64);
        let (mut server, _server_far) = tokio::io::duplex(64);
        client_far.write_all(b"x").await.unwrap();
        let started = Instant::now();
        let lifecycle = Lifecycle::default();
        let (ended, _) = copy(
            &mut client,
            &mut server,
            bounds(SHORT, LONG, None),
            &lifecycle,
        )
        .await;
        assert!(matches!(ended, Ended::Idle), "{ended:?}");
        assert!(started.elapsed() >= SHORT);
    }

    #[tokio::test]
    async fn after_one_side_closed_the_other_has_the_close_time() {
        // The server has closed; the client neither closes nor sends.
        let (mut client, _client_far) = tokio::io::duplex(64);
        let (mut server, server_far) = tokio::io::duplex(64);
        drop(server_far);
        let lifecycle = Lifecycle::default();
        let (ended, _) = copy(
            &mut client,
            &mut server,
            bounds(LONG, SHORT, None),
            &lifecycle,
        )
        .await;
        assert!(matches!(ended, Ended::HalfClosed), "{ended:?}");
    }

    #[tokio::test]
    async fn a_client_that_never_speaks_is_ended_at_its_first_byte_deadline() {
        let (mut client, _client_far) = tokio::io::duplex(64);
        let (mut server, mut server_far) = tokio::io::duplex(64);
        // The server greets; the client never answers.
        server_far.write_all(b"220 hello\r\n").await.unwrap();
        let lifecycle = Lifecycle::default();
        let (ended, copied) = copy(
            &mut client,
            &mut server,
            bounds(LONG, LONG, Some(SHORT)),
            &lifecycle,
        )
        .await;
        assert!(matches!(ended, Ended::NoFirstByte), "{ended:?}");
        assert_eq!(copied.to_client, 11);
    }

    #[tokio::test]
    async fn closing_the_proxy_ends_it() {
        let (mut client, _client_far) = tokio::io::duplex(64);
        let (mut server, _server_far) = tokio::io::duplex(64);
        let lifecycle = Lifecycle::default();
        lifecycle.close();
        let (ended, _) = copy(
            &mut client,
            &mut server,
            bounds(LONG, LONG, None),
            &lifecycle,
        )
        .await;
        assert!(matches!(ended, Ended::Shutdown), "{ended:?}");
    }
}
