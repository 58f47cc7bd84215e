//! The HTTP/2 connection to the upstream address of one accepted connection.
//!
//! Each connection TensorFlow opens to the sidecar gets its own upstream
//! connection, made on first use and made again if it closes. Keeping the
//! one-to-one mapping keeps TensorFlow's view of connections intact: a task
//! that sees its peer's connection go away learns it the same way it would
//! without a sidecar.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::batched::Batched;
use super::body::ProxyBody;
use super::first_bytes::FirstBytes;
use super::linger::{self, LINGER_BYTES, LINGER_TIME};
use super::tasks::Tracked;
use crate::io::Io;
use crate::mux::client::Session;
use crate::tls::{HandshakeError, TlsContext};
use crate::tuning;
use tlc_core::Role;

/// The upstream could not be reached.
#[derive(Debug, Error)]
pub enum UpstreamError {
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The upstream address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The HTTP/2 handshake failed.
    #[error("HTTP/2 handshake with {addr} failed: {source}")]
    Handshake {
        /// The upstream address.
        addr: SocketAddr,
        /// hyper's error.
        source: hyper::Error,
    },
    /// The connection was accepted but closed before the peer said anything
    /// (a sidecar in front of a task that is not listening yet, say).
    #[error("{addr} accepted the connection but closed it without answering")]
    NoAnswer {
        /// The upstream address.
        addr: SocketAddr,
    },
    /// Connecting took too long.
    #[error("connecting to {addr} timed out")]
    Timeout {
        /// The upstream address.
        addr: SocketAddr,
    },
    /// Our side of the handshake finished, then the peer closed without a
    /// word: in TLS 1.3 that is how a server refuses our certificate.
    #[error("{addr} closed the connection after the TLS handshake: it refused our certificate or identity (see its log)")]
    TlsRefused {
        /// The upstream address.
        addr: SocketAddr,
    },
    /// The mutual TLS handshake with the peer's sidecar failed.
    #[error("TLS with {addr} failed: {source} (does the peer run tlcd with the same [tls] CA and an identity tls.peer_identities accepts?)")]
    Tls {
        /// The upstream address.
        addr: SocketAddr,
        /// What the handshake said.
        source: HandshakeError,
    },
}

impl UpstreamError {
    /// Whether TLS was the reason: worth a warning, since the job cannot
    /// talk to that peer until certificates or settings are fixed.
    pub fn is_tls(&self) -> bool {
        matches!(
            self,
            UpstreamError::Tls { .. } | UpstreamError::TlsRefused { .. }
        )
    }
}

/// Where an upstream stands with a session to the peer's sidecar.
#[derive(Default)]
enum SessionState {
    /// Not asked for on this connection yet.
    #[default]
    Untried,
    /// Asked for; the peer has not answered.
    Opening,
    /// Open (until the session says it is not).
    Open(Arc<Session>),
    /// The peer answered without one: a stream per call on this connection.
    Refused,
}

/// A lazily made, self-healing HTTP/2 client connection.
pub struct Upstream {
    addr: SocketAddr,
    role: Role,
    tls: Option<Arc<TlsContext>>,
    sender: Mutex<Option<SendRequest<ProxyBody>>>,
    /// The session its calls share, where the peer's sidecar takes one.
    session: Arc<std::sync::Mutex<SessionState>>,
    /// Whether to open a session at all.
    sessions: bool,
    /// Whether the peer answered as a sidecar: only then is a session
    /// asked for (TensorFlow, or a server that reads a whole request
    /// before answering, is never sent the opening call).
    peer_sidecar: std::sync::atomic::AtomicBool,
    /// Cancelled when this upstream is dropped: a session still being
    /// opened is given up.
    _dropped: tokio_util::sync::DropGuard,
    gone: tokio_util::sync::CancellationToken,
    /// Where its connections' tasks run: the proxy's, so that shutdown
    /// waits until they have closed.
    tasks: TaskTracker,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer has to answer the call that opens a session.
const SESSION_ANSWER: Duration = Duration::from_secs(5);

impl Upstream {
    /// An upstream at `addr` for a route of `role`, reached over mutual
    /// TLS when `tls` is given; nothing is connected until the first
    /// request. Its connections run as tasks of `tasks`.
    pub fn new(
        addr: SocketAddr,
        role: Role,
        tls: Option<Arc<TlsContext>>,
        tasks: TaskTracker,
    ) -> Upstream {
        let gone = tokio_util::sync::CancellationToken::new();
        Upstream {
            addr,
            role,
            tls,
            sender: Mutex::new(None),
            session: Arc::default(),
            sessions: false,
            peer_sidecar: std::sync::atomic::AtomicBool::new(false),
            _dropped: gone.clone().drop_guard(),
            gone,
            tasks,
        }
    }

    /// This upstream, carrying its calls in one session to the peer's
    /// sidecar where the peer takes one (`on`).
    pub fn with_sessions(mut self, on: bool) -> Upstream {
        self.sessions = on;
        self
    }

    /// Says that the peer answered as a sidecar (the handler knows it from
    /// the answer's headers): from the next call on, a session may be
    /// asked for.
    pub fn peer_is_sidecar(&self) {
        self.peer_sidecar
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The open session to send a call on, if there is one. The first
    /// call on a connection opens it in the background (that call and any
    /// sent before the peer answers take streams of their own), once the
    /// peer has answered as a sidecar ([`Upstream::peer_is_sidecar`]); a
    /// peer that does not take one is not asked again on the same
    /// connection.
    pub async fn session(&self) -> Option<Arc<Session>> {
        if !self.sessions || !self.peer_sidecar.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        {
            let mut state = self.session.lock().unwrap_or_else(|e| e.into_inner());
            match &*state {
                SessionState::Open(session) if session.is_open() => {
                    return Some(Arc::clone(session));
                }
                SessionState::Opening | SessionState::Refused => return None,
                SessionState::Open(_) | SessionState::Untried => {}
            }
            *state = SessionState::Opening;
        }
        let slot = Arc::clone(&self.session);
        let Ok(mut sender) = self.sender().await else {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = SessionState::Untried;
            return None;
        };
        let authority = self.addr.to_string();
        let gone = self.gone.clone();
        tokio::spawn(async move {
            // A peer that holds the call unanswered (a server that reads
            // the whole request first) is given up on, and so is a peer of
            // a connection that ended meanwhile.
            let opened = tokio::select! {
                opened = tokio::time::timeout(SESSION_ANSWER, Session::open(&mut sender, &authority)) => opened,
                () = gone.cancelled() => return,
            };
            let next = match opened {
                Err(_) => {
                    debug!(upstream = %authority, "the peer did not answer the session call; a stream per call");
                    crate::mux::count(&crate::mux::counters().refused);
                    SessionState::Refused
                }
                Ok(Ok(Some(session))) => {
                    debug!(upstream = %authority, "calls to the peer's sidecar share a session");
                    SessionState::Open(Arc::new(session))
                }
                Ok(Ok(None)) => {
                    debug!(upstream = %authority, "the peer takes no session; a stream per call");
                    SessionState::Refused
                }
                Ok(Err(err)) => {
                    debug!(upstream = %authority, error = %err, "opening a session failed");
                    crate::mux::count(&crate::mux::counters().refused);
                    SessionState::Refused
                }
            };
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = next;
        });
        None
    }

    /// The address requests go to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle to send one request on, connecting first if needed.
    pub async fn sender(&self) -> Result<SendRequest<ProxyBody>, UpstreamError> {
        let mut slot = self.sender.lock().await;
        if let Some(sender) = slot.as_ref() {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
            debug!(upstream = %self.addr, "upstream connection closed; reconnecting");
        }
        let sender = tokio::time::timeout(CONNECT_TIMEOUT, self.connect())
            .await
            .map_err(|_| UpstreamError::Timeout { addr: self.addr })??;
        *slot = Some(sender.clone());
        // A new connection: a session is asked for anew on it.
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*session, SessionState::Opening) {
            *session = SessionState::Untried;
        }
        Ok(sender)
    }

    /// Whether the task at the upstream address is gone: its connection
    /// closed and a new one is refused. A task that is still there gets a
    /// new connection, kept for the next call.
    pub async fn is_gone(&self) -> bool {
        let closed = match self.sender.lock().await.as_ref() {
            Some(sender) => sender.is_closed(),
            None => true,
        };
        closed && self.sender().await.is_err()
    }

    /// Forgets the current connection, so that the next
    /// [`Upstream::sender`] connects anew. Calls in progress on it finish:
    /// hyper keeps a connection until its last stream ends.
    pub async fn discard(&self) {
        *self.sender.lock().await = None;
    }

    async fn connect(&self) -> Result<SendRequest<ProxyBody>, UpstreamError> {
        let addr = self.addr;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| UpstreamError::Connect { addr, source })?;
        tuning::tcp(&tcp);
        let io: Box<dyn Io> = match &self.tls {
            Some(tls) => {
                let (stream, identity) = tls
                    .connect(addr, tcp)
                    .await
                    .map_err(|source| UpstreamError::Tls { addr, source })?;
                debug!(upstream = %addr, peer = %identity, "peer authenticated");
                Box::new(stream)
            }
            None => Box::new(tcp),
        };
        // The socket comes back once hyper is done with it, to be closed
        // without a reset (see `linger`).
        let (io, returned) = linger::lend(io);
        let (io, answered) = FirstBytes::new(io);
        let mut builder = http2::Builder::new(Tracked(self.tasks.clone()));
        tuning::client(&mut builder, self.role);
        let (sender, connection) = builder
            .handshake(TokioIo::new(Batched::new(io)))
            .await
            .map_err(|source| UpstreamError::Handshake { addr, source })?;
        self.tasks.spawn(async move {
            if let Err(err) = connection.await {
                debug!(upstream = %addr, error = %err, "upstream connection ended with an error");
            }
            // hyper runs the HTTP/2 connection in a task of its own, which
            // gives the socket back when it ends.
            if let Ok(io) = returned.await {
                let how = linger::linger(io, LINGER_TIME, LINGER_BYTES).await;
                debug!(upstream = %addr, ?how, "upstream connection closed");
            }
        });
        // Only a peer that sent its SETTINGS is there; see `first_bytes`.
        match answered.await {
            Ok(true) => Ok(sender),
            _ if self.tls.is_some() => Err(UpstreamError::TlsRefused { addr }),
            _ => Err(UpstreamError::NoAnswer { addr }),
        }
    }
}
