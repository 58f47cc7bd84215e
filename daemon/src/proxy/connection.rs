//! What a call knows of the connection it arrived on.
//!
//! The listener stamps every request with its connection's
//! [`ConnectionId`] (a request extension), so that state one call leaves
//! for a later one (a fallback's original response) can be bound to the
//! connection that may claim it.

use std::sync::atomic::{AtomicU64, Ordering};

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
