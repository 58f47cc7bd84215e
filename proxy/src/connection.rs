//! What a call knows of the connection it arrived on.
//!
//! The listener stamps every request with its connection's
//! [`ConnectionId`] (a request extension), so that state one call leaves
//! for a later one (a fallback's original response) can be bound to the
//! connection that may claim it. It also keeps count of connections
//! ([`ConnectionStats`]) and of the calls on each ([`Activity`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One accepted connection, unique for the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

impl ConnectionId {
    /// A fresh id.
    pub fn next() -> ConnectionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The id the listener stamped on `request`, if it came through one.
    pub fn of<B>(request: &http::Request<B>) -> Option<ConnectionId> {
        request.extensions().get::<ConnectionId>().copied()
    }
}

/// Whether a repeated warning (a refused connection, a failed handshake)
/// may be logged now: at most one a second for the whole process, so that
/// a scan or a flood cannot fill the log.
pub fn warn_allowed() -> bool {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    LAST.swap(now, Ordering::Relaxed) != now
}

/// Why the proxy closed a connection before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The listener already serves `limits.max_connections`.
    Limit,
    /// No HTTP/2 preface (or TLS hello) within `limits.handshake_seconds`.
    Handshake,
    /// A TLS handshake failed, or TLS was offered where none is configured,
    /// or plaintext that is not HTTP/2 where TLS is required (nothing of
    /// it is forwarded).
    Tls,
    /// The upstream could not be reached.
    Upstream,
    /// Not HTTP/2, and the listener forwards
    /// `limits.max_opaque_connections` such connections already.
    OpaqueLimit,
}

impl Refusal {
    /// Every refusal, in label order.
    pub const ALL: [Refusal; 5] = [
        Refusal::Limit,
        Refusal::Handshake,
        Refusal::Tls,
        Refusal::Upstream,
        Refusal::OpaqueLimit,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Limit => "limit",
            Refusal::Handshake => "handshake",
            Refusal::Tls => "tls",
            Refusal::Upstream => "upstream_unreachable",
            Refusal::OpaqueLimit => "opaque_limit",
        }
    }
}

/// Why the proxy closed a connection it was serving without waiting for
/// its client any longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cut {
    /// A forwarded connection passed no byte either way for
    /// `limits.opaque_idle_seconds`.
    OpaqueIdle,
    /// One side of a forwarded connection closed and the other had not
    /// finished `limits.close_seconds` later.
    HalfClosed,
    /// An HTTP/2 connection sent its GOAWAY for being idle and had not
    /// closed `limits.close_seconds` later (a client that never reads).
    GoawayTimeout,
}

impl Cut {
    /// Every cut, in label order.
    pub const ALL: [Cut; 3] = [Cut::OpaqueIdle, Cut::HalfClosed, Cut::GoawayTimeout];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Cut::OpaqueIdle => "opaque_idle",
            Cut::HalfClosed => "half_closed",
            Cut::GoawayTimeout => "goaway_timeout",
        }
    }
}

/// Connections served and refused, for metrics and tests.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    open: AtomicU64,
    idle_closed: AtomicU64,
    opaque: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
    cut: [AtomicU64; Cut::ALL.len()],
}

impl ConnectionStats {
    /// Counts a connection being served until the guard drops.
    pub fn open(&self) -> OpenGuard<'_> {
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self)
    }

    /// Counts a refusal.
    pub fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed hard.
    pub fn cut(&self, why: Cut) {
        self.cut[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections closed hard so far, by reason.
    pub fn cuts(&self) -> impl Iterator<Item = (Cut, u64)> + '_ {
        Cut::ALL
            .into_iter()
            .map(|c| (c, self.cut[c as usize].load(Ordering::Relaxed)))
    }

    /// Counts a connection that is not HTTP/2, forwarded untouched.
    pub fn opaque(&self) {
        self.opaque.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections forwarded untouched so far.
    pub fn opaque_total(&self) -> u64 {
        self.opaque.load(Ordering::Relaxed)
    }

    /// Counts a connection closed for being idle.
    pub fn idle_closed(&self) {
        self.idle_closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections being served now.
    pub fn open_now(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Refusals so far, by reason.
    pub fn refusals(&self) -> impl Iterator<Item = (Refusal, u64)> + '_ {
        Refusal::ALL
            .into_iter()
            .map(|r| (r, self.refused[r as usize].load(Ordering::Relaxed)))
    }

    /// Connections closed for being idle so far.
    pub fn idle_closed_total(&self) -> u64 {
        self.idle_closed.load(Ordering::Relaxed)
    }
}

/// A connection being served; see [`ConnectionStats::open`].
pub struct OpenGuard<'a>(&'a ConnectionStats);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Calls in progress on one connection, and when the last one ended: what
/// an idle timeout needs to know.
#[derive(Debug)]
pub struct Activity {
    active: AtomicU64,
    last_end: Mutex<Instant>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            active: AtomicU64::new(0),
            last_end: Mutex::new(Instant::now()),
        }
    }
}

impl Activity {
    /// Marks a call in progress until the guard drops (which should be when
    /// its response body is done, not when the handler returns).
    pub fn begin(self: &Arc<Self>) -> CallGuard {
        self.active.fetch_add(1, Ordering::SeqCst);
        CallGuard(Arc::clone(self))
    }

    /// Calls in progress now.
    pub fn in_flight(&self) -> u64 {
        self.active.load(Ordering::SeqCst)
    }

    /// Returns once no call has been in progress for `limit`.
    pub async fn idle_for(&self, limit: Duration) {
        loop {
            let since = *self.last_end.lock().unwrap_or_else(|e| e.into_inner());
            let quiet = since.elapsed();
            if self.active.load(Ordering::SeqCst) == 0 && quiet >= limit {
                return;
            }
            let step = (limit / 4).max(Duration::from_millis(10));
            tokio::time::sleep(
                step.min(limit.saturating_sub(quiet))
                    .max(Duration::from_millis(10)),
            )
            .await;
        }
    }
}

/// A call in progress; see [`Activity::begin`].
pub struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        *self.0.last_end.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_means_no_call_for_the_whole_limit() {
        let activity = Arc::new(Activity::default());
        let call = activity.begin();
        let limit = Duration::from_millis(50);
        let waited = tokio::time::timeout(Duration::from_millis(150), activity.idle_for(limit));
        assert!(waited.await.is_err(), "a call in progress is not idle");
        drop(call);
        let started = Instant::now();
        activity.idle_for(limit).await;
        assert!(started.elapsed() >= limit - Duration::from_millis(5));
    }

    #[test]
    fn open_connections_and_refusals_are_counted() {
        let stats = ConnectionStats::default();
        let guard = stats.open();
        assert_eq!(stats.open_now(), 1);
        drop(guard);
        assert_eq!(stats.open_now(), 0);
        stats.refused(Refusal::Limit);
        stats.refused(Refusal::Limit);
        let limit = stats.refusals().find(|(r, _)| *r == Refusal::Limit);
        assert_eq!(limit, Some((Refusal::Limit, 2)));
        stats.cut(Cut::GoawayTimeout);
        let cuts: Vec<_> = stats.cuts().collect();
        assert_eq!(
            cuts,
            [
                (Cut::OpaqueIdle, 0),
                (Cut::HalfClosed, 0),
                (Cut::GoawayTimeout, 1)
            ]
        );
    }
}
