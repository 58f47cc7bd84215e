//! Every task a proxy's connections spawn, tracked.
//!
//! hyper spawns tasks of its own through the executor it is given: one per
//! call a server connection answers, and for a client connection the
//! HTTP/2 connection itself and the pipe of each request body. With
//! `tokio::spawn` they escape the proxy's [`TaskTracker`]: a drain that
//! waits for the tracker would return, and the process exit, while an
//! upstream connection is still closing. [`Tracked`] spawns them on the
//! tracker instead, so shutdown waits for every one of them (bounded by
//! the drain time, as everything else).

use std::future::Future;

use tokio_util::task::TaskTracker;

/// A hyper executor that spawns on a [`TaskTracker`].
#[derive(Debug, Clone)]
pub struct Tracked(pub TaskTracker);

impl<F> hyper::rt::Executor<F> for Tracked
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        self.0.spawn(future);
    }
}
