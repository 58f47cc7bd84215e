//! How a proxy's connections end.
//!
//! TensorFlow keeps one connection per pair of tasks for the whole job and
//! treats a broken one as a failed task: it rebuilds its session, and a
//! chief without a checkpoint re-initialises the model (see TF-NOTES). So
//! a stopping sidecar never closes a connection TensorFlow still uses.
//! Shutdown goes in stages, each a signal every connection watches:
//!
//! 1. **Stop accepting**: the listeners close (or now belong to a
//!    successor that took them over); established connections go on,
//!    new calls on them included.
//! 2. **Drain** (SIGTERM): a connection ends when its TensorFlow has:
//!    connections TensorFlow opened end when it closes them; a peer's
//!    connection to this sidecar ends once the local task behind it is
//!    gone (its connection closed and a new one refused) and no call is in
//!    progress on it.
//! 3. **Close**: every connection gets a graceful HTTP/2 GOAWAY: calls in
//!    progress finish, new ones go to a new connection. After a take-over
//!    that new connection reaches the successor through the same listening
//!    socket, so nothing fails; at the end of `drain_seconds` without a
//!    successor, nobody is listening any more and TensorFlow sees its
//!    connection fail.
//!
//! However it ends, a connection's socket is closed with a lingering
//! close (see [`super::linger`]): a plain close while the client still
//! sends would reset the connection and lose the end of the last response.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::connection::Activity;
use super::upstream::Upstream;
use tlc_core::Role;

/// How often a draining connection checks whether its task is gone.
const GONE_POLL: Duration = Duration::from_millis(250);

/// The shutdown signals shared by every listener and connection of one
/// proxy. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    accepting: CancellationToken,
    draining: CancellationToken,
    closing: CancellationToken,
}

impl Lifecycle {
    /// Stage 1: listeners stop accepting.
    pub fn stop_accepting(&self) {
        self.accepting.cancel();
    }

    /// Stage 2: connections end once their TensorFlow task has.
    pub fn drain(&self) {
        self.stop_accepting();
        self.draining.cancel();
    }

    /// Stage 3: every connection closes gracefully now.
    pub fn close(&self) {
        self.drain();
        self.closing.cancel();
    }

    /// Cancelled when listeners must stop accepting.
    pub fn accepting(&self) -> &CancellationToken {
        &self.accepting
    }

    /// Resolves at stage 3, when every connection closes.
    pub async fn closed(&self) {
        self.closing.cancelled().await;
    }

    /// Resolves when the connection this is called for should close
    /// gracefully: at stage 3, or during a drain once an inbound
    /// connection's task is gone and no call is in progress on it.
    pub async fn ending(&self, role: Role, upstream: &Upstream, activity: &Activity) {
        let task_gone = async {
            self.draining.cancelled().await;
            if role != Role::Inbound {
                // TensorFlow's own connection: it closes it when it exits.
                return std::future::pending().await;
            }
            loop {
                if activity.in_flight() == 0 && upstream.is_gone().await {
                    return;
                }
                tokio::time::sleep(GONE_POLL).await;
            }
        };
        tokio::select! {
            () = self.closing.cancelled() => {}
            () = task_gone => {}
        }
    }
}
