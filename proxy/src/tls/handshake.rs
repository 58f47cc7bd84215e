//! One TLS handshake on a connection between sidecars, either side, and
//! who the peer turned out to be.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rustls::{CertificateError, CommonState};
use rustls_pki_types::ServerName;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{client, server};

use super::context::{TlsContext, ALPN_H2};
use super::identity::{IdentityMismatch, PeerIdentity};

/// How long a handshake may take: a peer that connects and says nothing
/// must not hold a task forever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a handshake with a peer failed.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The peer's certificate chains to our CA bundle but names no
    /// identity that `tls.peer_identities` accepts.
    #[error("peer refused: {0}")]
    Identity(IdentityMismatch),
    /// TLS itself failed: no certificate, an unknown CA, an expired
    /// certificate, an alert from the peer (which refused ours), …
    #[error("TLS handshake failed: {0}")]
    Tls(rustls::Error),
    /// The connection failed or closed during the handshake.
    #[error("connection failed during the TLS handshake: {0}")]
    Io(io::Error),
    /// The handshake took longer than [`HANDSHAKE_TIMEOUT`].
    #[error("TLS handshake took longer than {}s", HANDSHAKE_TIMEOUT.as_secs())]
    Timeout,
    /// The peer did not agree on HTTP/2 (not a tlc sidecar, or misconfigured).
    #[error("peer did not agree on ALPN \"h2\" (it chose {0})")]
    NotH2(String),
}

impl From<io::Error> for HandshakeError {
    /// tokio-rustls wraps rustls' error in an `io::Error`; take it out so
    /// the reason reads plainly.
    fn from(err: io::Error) -> HandshakeError {
        let Some(tls) = err
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        else {
            return HandshakeError::Io(err);
        };
        if let rustls::Error::InvalidCertificate(CertificateError::Other(other)) = tls {
            if let Some(mismatch) = other.0.downcast_ref::<IdentityMismatch>() {
                return HandshakeError::Identity(mismatch.clone());
            }
        }
        HandshakeError::Tls(tls.clone())
    }
}

impl TlsContext {
    /// The inbound side: a TLS server handshake on an accepted connection
    /// with the configuration in use now, within [`HANDSHAKE_TIMEOUT`].
    /// Returns the stream to serve HTTP/2 on and the client's identity.
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> Result<(server::TlsStream<IO>, PeerIdentity), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = self.acceptor().accept(io);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| HandshakeError::Timeout)??;
        let identity = self.checked_peer(stream.get_ref().1)?;
        Ok((stream, identity))
    }

    /// The outbound side: a TLS client handshake on a connection to `addr`
    /// with the configuration in use now, within [`HANDSHAKE_TIMEOUT`].
    /// The server is judged by its certificate and `tls.peer_identities`,
    /// not by `addr`, which only fills the handshake's server name.
    /// Returns the stream to speak HTTP/2 on and the server's identity.
    ///
    /// In TLS 1.3 the client finishes first: a server that refuses our
    /// certificate says so with an alert that arrives on the first read.
    pub async fn connect<IO>(
        &self,
        addr: SocketAddr,
        io: IO,
    ) -> Result<(client::TlsStream<IO>, PeerIdentity), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::IpAddress(addr.ip().into());
        let handshake = self.connector().connect(name, io);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| HandshakeError::Timeout)??;
        let identity = self.checked_peer(stream.get_ref().1)?;
        Ok((stream, identity))
    }

    /// The identity of the peer of a finished handshake (either side), by
    /// `tls.peer_identities`; `None` before the handshake or without a
    /// matching certificate.
    pub fn peer_identity(&self, connection: &CommonState) -> Option<PeerIdentity> {
        let leaf = connection.peer_certificates()?.first()?;
        self.patterns.identify(leaf).ok()
    }

    fn checked_peer(&self, connection: &CommonState) -> Result<PeerIdentity, HandshakeError> {
        match connection.alpn_protocol() {
            Some(ALPN_H2) => {}
            other => {
                let chose = other.map_or("none".to_string(), |p| {
                    format!("{:?}", String::from_utf8_lossy(p))
                });
                return Err(HandshakeError::NotH2(chose));
            }
        }
        // The verifiers accepted the certificate by these same patterns.
        match connection.peer_certificates().and_then(|c| c.first()) {
            Some(leaf) => self
                .patterns
                .identify(leaf)
                .map_err(HandshakeError::Identity),
            None => Err(HandshakeError::Tls(rustls::Error::NoCertificatesPresented)),
        }
    }
}
