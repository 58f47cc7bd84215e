//! The network between the emulated pods: every pod has a network
//! interface ([`Nic`]) with a rate limit in each direction, and every
//! connection from one pod to another goes through an in-process TCP relay
//! ([`Relay`]) that makes its bytes pay for bandwidth on both ends.
//!
//! Bytes from pod A to pod B take tokens from A's upload bucket and B's
//! download bucket at the same time (as a packet occupies both links), so a
//! pod that talks to many peers, like the parameter task, shares its link
//! between them. The relay counts every byte it carries: HTTP/2 frames,
//! headers, gRPC prefixes, protobuf — everything but TCP/IP headers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::debug;

use crate::accept::Accepting;

/// Bytes read from a socket at a time: one slot of the link schedule.
const CHUNK: usize = 16 << 10;
/// Bytes a bucket lets through at once after being idle.
const BURST: f64 = 32.0 * 1024.0;
/// Chunks in flight inside one direction of a relay (delayed by latency).
const IN_FLIGHT: usize = 4096;

/// A token bucket: lets bytes through at `rate` on average, with a small
/// burst. Reservations go into debt, so concurrent senders are served in
/// the order they asked, each waiting for the bytes before it.
#[derive(Debug)]
pub struct TokenBucket {
    /// Bytes per second; `None` is unlimited.
    rate: Option<f64>,
    /// Tokens (bytes) available, negative when in debt, and when last refilled.
    state: Mutex<(f64, Instant)>,
    /// Bytes that went through.
    bytes: AtomicU64,
}

impl TokenBucket {
    /// A bucket for `rate` bytes per second (`None`: no limit), full.
    pub fn new(rate: Option<f64>) -> TokenBucket {
        TokenBucket {
            rate,
            state: Mutex::new((BURST, Instant::now())),
            bytes: AtomicU64::new(0),
        }
    }

    /// Takes `n` bytes' worth of tokens; returns how long the sender must
    /// wait before those bytes have been sent.
    pub fn reserve(&self, n: usize, now: Instant) -> Duration {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = &mut *state;
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * rate).min(BURST) - n as f64;
        *last = now.max(*last);
        if *tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-*tokens / rate)
        }
    }

    /// Bytes that went through so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// One pod's network interface: a bucket for each direction.
#[derive(Debug)]
pub struct Nic {
    /// The pod's name, for reports.
    pub name: String,
    /// Bytes leaving the pod.
    pub up: TokenBucket,
    /// Bytes arriving at the pod.
    pub down: TokenBucket,
}

impl Nic {
    /// An interface limited to `rate_mbit` megabits per second each way
    /// (`None`: unlimited).
    pub fn new(name: &str, rate_mbit: Option<f64>) -> Arc<Nic> {
        let rate = rate_mbit.map(|mbit| mbit * 1e6 / 8.0);
        Arc::new(Nic {
            name: name.to_owned(),
            up: TokenBucket::new(rate),
            down: TokenBucket::new(rate),
        })
    }
}

/// Bytes a relay carried, per direction.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// From the connecting pod to the pod it dialled.
    pub forward: AtomicU64,
    /// Back.
    pub backward: AtomicU64,
}

/// A listener in pod `from` whose connections reach `target` in pod `to`
/// across the two pods' interfaces.
pub struct Relay {
    accepting: Accepting,
    counters: Arc<RelayCounters>,
}

/// One direction of a relayed connection: the buckets it pays, its
/// counter, and the latency it adds.
#[derive(Clone)]
struct Path {
    buckets: [Arc<Nic>; 2],
    upload_of_first: bool,
    latency: Duration,
}

impl Path {
    fn reserve(&self, n: usize) -> Duration {
        let now = Instant::now();
        let (a, b) = if self.upload_of_first {
            (&self.buckets[0].up, &self.buckets[1].down)
        } else {
            (&self.buckets[1].up, &self.buckets[0].down)
        };
        a.reserve(n, now).max(b.reserve(n, now))
    }
}

impl Relay {
    /// Listens on a free loopback port; connections are forwarded to
    /// `target`, as if dialled from pod `from` to pod `to`, with `latency`
    /// added each way.
    pub async fn start(
        from: Arc<Nic>,
        to: Arc<Nic>,
        target: SocketAddr,
        latency: Duration,
    ) -> std::io::Result<Relay> {
        let counters = Arc::new(RelayCounters::default());
        let forward = Path {
            buckets: [from, to],
            upload_of_first: true,
            latency,
        };
        let backward = Path {
            upload_of_first: false,
            ..forward.clone()
        };
        let c = counters.clone();
        let accepting = Accepting::start(move |client| {
            let (forward, backward, c) = (forward.clone(), backward.clone(), c.clone());
            async move {
                if let Err(err) = relay(client, target, forward, backward, &c).await {
                    debug!(%target, error = %err, "relayed connection ended");
                }
            }
        })
        .await?;
        Ok(Relay {
            accepting,
            counters,
        })
    }

    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.accepting.addr()
    }

    /// Bytes carried so far: (forward, backward).
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.counters.forward.load(Ordering::Relaxed),
            self.counters.backward.load(Ordering::Relaxed),
        )
    }

    /// Closes the listener and every relayed connection.
    pub async fn shutdown(self) {
        self.accepting.shutdown().await
    }
}

/// Carries one connection both ways until both sides have closed.
async fn relay(
    client: TcpStream,
    target: SocketAddr,
    forward: Path,
    backward: Path,
    counters: &RelayCounters,
) -> std::io::Result<()> {
    let server = TcpStream::connect(target).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (a, b) = tokio::join!(
        pump(client_read, server_write, forward, &counters.forward),
        pump(server_read, client_write, backward, &counters.backward),
    );
    a.and(b)
}

/// Moves bytes one way: a reader that pays the link for each chunk, and a
/// writer that delivers it once its latency has passed.
async fn pump(
    mut reader: OwnedReadHalf,
    mut writer: OwnedWriteHalf,
    path: Path,
    counter: &AtomicU64,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let latency = path.latency;
    let read = async move {
        loop {
            let mut buf = vec![0u8; CHUNK];
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            buf.truncate(n);
            tokio::time::sleep(path.reserve(n)).await;
            counter.fetch_add(n as u64, Ordering::Relaxed);
            if tx.send((Instant::now() + latency, buf)).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some((due, buf)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            writer.write_all(&buf).await?;
        }
        writer.shutdown().await
    };
    let (r, w) = tokio::join!(read, write);
    r.and(w)
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn bucket_goes_into_debt_at_its_rate() {
        let bucket = TokenBucket::new(Some(1000.0));
        let t = Instant::now();
        assert_eq!(bucket.reserve(BURST as usize, t), Duration::ZERO);
        let wait = bucket.reserve(500, t);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        // A second sender queues behind the first.
        let wait = bucket.reserve(500, t);
        assert!((wait.as_secs_f64() - 1.0).abs() < 1e-6, "{wait:?}");
        // Time pays the debt back.
        let wait = bucket.reserve(0, t + Duration::from_secs(1));
        assert_eq!(wait, Duration::ZERO);
        assert_eq!(bucket.bytes(), BURST as u64 + 1000);
    }

    #[test]
    fn unlimited_bucket_never_waits() {
        let bucket = TokenBucket::new(None);
        assert_eq!(bucket.reserve(1 << 30, Instant::now()), Duration::ZERO);
    }

    #[tokio::test]
    async fn relay_carries_bytes_at_the_rate() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        let (a, b) = (Nic::new("a", Some(8.0)), Nic::new("b", None));
        let relay = Relay::start(a.clone(), b.clone(), target, Duration::ZERO)
            .await
            .unwrap();
        let echo = tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(b"done").await.unwrap();
            got.len()
        });
        let mut c = TcpStream::connect(relay.addr()).await.unwrap();
        let started = Instant::now();
        // 8 Mbit/s is 1 MB/s: 232 KiB beyond the burst take about 0.24 s.
        c.write_all(&vec![7u8; 264 << 10]).await.unwrap();
        c.shutdown().await.unwrap();
        let mut reply = Vec::new();
        c.read_to_end(&mut reply).await.unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(echo.await.unwrap(), 264 << 10);
        assert_eq!(reply, b"done");
        // Only a lower bound (the limit holds: the bucket cannot be faster
        // than its rate); how much slower a loaded machine is says nothing.
        assert!(elapsed >= 0.2, "took {elapsed} s");
        assert_eq!(relay.bytes(), (264 << 10, 4));
        assert_eq!(a.up.bytes(), 264 << 10);
        assert_eq!(b.down.bytes(), 264 << 10);
        relay.shutdown().await;
    }
}
