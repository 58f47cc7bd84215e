//! Handing a running tlcd's listening sockets to its successor (issue 11),
//! so that an upgrade or a restart neither breaks TensorFlow's connections
//! nor leaves a moment in which nobody listens on tlcd's ports.
//!
//! The running tlcd binds an [`Offer`]: a Unix socket (mode 0600, by
//! default at [`default_socket_path`]). A new tlcd started with
//! `--take-over` calls [`take_over`]: it connects, says hello, and receives
//! the manifest of the running one's listeners together with their file
//! descriptors (SCM_RIGHTS, one `sendmsg`). It starts accepting on them and
//! calls [`Inherited::ready`]; only then does [`Offer::hand_over`] return
//! `Ok` in the old tlcd, which stops accepting and drains. Both processes
//! share the same listening sockets meanwhile, so a connection arriving at
//! any moment waits in the one backlog until either of them accepts it.
//! Envoy's hot restart does the same with its listeners.
//!
//! Every failure before "ready" (a stranger on the socket, a successor of
//! another version or of another user, one that dies or hangs) is an
//! `Err` on both sides and leaves the old tlcd serving; it keeps offering.
//!
//! - `protocol.rs`: the three lines ([`Hello`], [`Manifest`], [`Ready`]),
//!   pure parsers and writers, and the bounds.
//! - `wire.rs`: a line with descriptors over the Unix socket, and a line
//!   without.
//! - `offer.rs`: the running tlcd's side, [`Offer`].
//! - `take_over.rs`: the successor's side, [`take_over`] and [`Inherited`].
//! - `netns.rs`: which network namespace each end is in; listeners never
//!   cross from one to another.
//!
//! ```no_run
//! # async fn f(route: std::net::TcpListener) -> Result<(), tlc_proxy::handover::HandoverError> {
//! use std::time::Duration;
//! use tlc_proxy::handover::{self, Offer, Offered, Purpose};
//! // The running tlcd:
//! let offer = Offer::bind(&handover::default_socket_path(4322))?;
//! let offered = [Offered { purpose: Purpose::Route, listener: &route }];
//! loop {
//!     match offer.hand_over(&offered, Duration::from_secs(10)).await {
//!         Ok(successor) => break, // stop accepting, drain, exit
//!         Err(err) => tracing::warn!("hand-over failed, still serving: {err}"),
//!     }
//! }
//! // The successor:
//! let mut inherited = handover::take_over(&handover::default_socket_path(4322),
//!                                         Duration::from_secs(10)).await?;
//! let addr = "127.0.0.1:4322".parse().expect("an address");
//! if let Some(listener) = inherited.take(Purpose::Route, addr) {
//!     let listener = tokio::net::TcpListener::from_std(listener);
//!     // ... accept on it
//! }
//! inherited.ready().await?;
//! # Ok(()) }
//! ```

mod netns;
mod offer;
pub mod protocol;
mod take_over;
mod wire;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

pub use offer::{HandedOver, Offer, Offered};
pub use protocol::{Hello, Manifest, ManifestEntry, Purpose, Ready, MAX_LINE, MAX_LISTENERS};
pub use take_over::{take_over, Inherited, InheritedListener};

use tlc_core::runtime_dir::{self, PrivateDirError};

/// How long the running tlcd waits for a connected successor's hello, and
/// either side for one write: a local peer that is alive answers at once.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a hand-over did not happen. On the running tlcd's side every one of
/// them means: keep serving.
#[derive(Debug, Error)]
pub enum HandoverError {
    /// The directory of the socket cannot be made or is not ours.
    #[error("the hand-over socket's directory: {0}")]
    Directory(#[from] PrivateDirError),
    /// Another tlcd is already offering at this path.
    #[error("another tlcd offers its listeners at {path}; stop it or give this one another port or socket")]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The path holds something that is not a socket.
    #[error("{path} exists and is not a socket; remove it or choose another hand-over socket")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket cannot be bound or set up.
    #[error("cannot offer the listeners at {path}: {cause}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// Nobody offers at the path.
    #[error("cannot reach a running tlcd at {path}: {cause}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// Reading or writing the hand-over socket failed.
    #[error("hand-over I/O failed while {what}: {cause}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The peer runs as another user.
    #[error("the peer on the hand-over socket runs as uid {uid}, this tlcd as uid {ours}; listeners go only to the same user")]
    OtherUser {
        /// The peer's uid.
        uid: u32,
        /// Ours.
        ours: u32,
    },
    /// The peer is in another network namespace: its listeners would
    /// serve another network's connections.
    #[error("the peer on the hand-over socket (pid {pid}) is in another network namespace (net:[{theirs}], this tlcd net:[{ours}]); listeners go only to a tlcd in the same one: give each namespace its own hand-over socket")]
    OtherNetwork {
        /// The peer's process id.
        pid: i32,
        /// The inode naming the peer's namespace.
        theirs: u64,
        /// Ours.
        ours: u64,
    },
    /// A step took too long.
    #[error("no {what} within {limit:?}")]
    Timeout {
        /// What did not come.
        what: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The peer closed the connection.
    #[error("the peer closed the hand-over connection before its {what}")]
    Closed {
        /// What was still expected.
        what: &'static str,
    },
    /// A line longer than [`MAX_LINE`].
    #[error("the {what} is longer than {limit} bytes")]
    TooLong {
        /// Which line.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A line that is not what the protocol says.
    #[error("bad {what}: {reason}")]
    Malformed {
        /// Which line.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A line of a protocol version this tlcd does not speak.
    #[error("the {what} is of hand-over version {version}, this tlcd speaks version {}; upgrade the older tlcd with a restart instead", protocol::VERSION)]
    Version {
        /// Which line.
        what: &'static str,
        /// The version it claims.
        version: u64,
    },
    /// The running tlcd refused to hand over.
    #[error("the running tlcd refused to hand over its listeners: {0}")]
    Refused(String),
    /// The successor could not serve on the listeners.
    #[error("the successor is not serving: {0}")]
    NotReady(String),
    /// Descriptors and manifest do not match.
    #[error("the manifest lists {listed} listeners but {received} descriptors came with it")]
    Descriptors {
        /// Listeners in the manifest.
        listed: usize,
        /// Descriptors received.
        received: usize,
    },
    /// More descriptors than [`MAX_LISTENERS`] (the excess is closed).
    #[error("more than {} descriptors came with the manifest", MAX_LISTENERS)]
    TooManyDescriptors,
    /// A descriptor is not the listening TCP socket the manifest says.
    #[error("the {purpose} listener handed over for {addr} is not usable: {why}")]
    NotListening {
        /// What it would serve.
        purpose: Purpose,
        /// The address the manifest gives.
        addr: SocketAddr,
        /// What is wrong.
        why: String,
    },
    /// The caller offered something that cannot be handed over.
    #[error("cannot hand over: {0}")]
    Offer(String),
}

/// Where a tlcd whose first listener is on `first_listen_port` offers its
/// listeners by default: `handover-PORT-net-INODE.sock` in tlcd's runtime
/// directory (`$XDG_RUNTIME_DIR/tlcd/`, else `$TMPDIR/tlcd-UID/`; see
/// [`tlc_core::runtime_dir`]), INODE naming its network namespace
/// (`handover-PORT.sock` where `/proc` does not show it). Its successor,
/// configured with the same listeners in the same namespace, finds it
/// there; a tlcd in another namespace sharing the directory does not.
pub fn default_socket_path(first_listen_port: u16) -> PathBuf {
    let name = match netns::ours() {
        Some(inode) => format!("handover-{first_listen_port}-net-{inode}.sock"),
        None => format!("handover-{first_listen_port}.sock"),
    };
    runtime_dir::directory().join(name)
}
