//! Mutual TLS between sidecars (`[tls]`, `mode = "mutual"`).
//!
//! The outbound side of one sidecar dials the inbound side of another; with
//! TLS on, both present a certificate, both check the other's chain against
//! the CA bundle and its identity (a SPIFFE ID or DNS name in the
//! certificate) against `tls.peer_identities`, and they agree on HTTP/2 by
//! ALPN. TLS 1.3 only, rustls with the ring provider.
//!
//! - [`settings`]: the `[tls]` table and its validation.
//! - [`identity`]: the pattern syntax, and a peer's identity.
//! - `material.rs`: reading the files, errors that name them; `validity.rs`:
//!   when our certificate expires.
//! - `verify.rs`: the two certificate verifiers (chain, then identity).
//! - `context.rs`: [`TlsContext`], the configurations in use.
//! - `handshake.rs`: [`TlsContext::accept`] and [`TlsContext::connect`].
//! - `reload.rs`: new files replace the configurations, connections stay.
//!
//! ```no_run
//! # async fn f(settings: tlc_proxy::tls::TlsSettings, tcp: tokio::net::TcpStream,
//! #            addr: std::net::SocketAddr) -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use tlc_proxy::tls::TlsContext;
//! let tls = Arc::new(TlsContext::load(&settings)?);
//! tls.clone().spawn_reloader(tokio_util::sync::CancellationToken::new());
//! let (stream, peer) = tls.connect(addr, tcp).await?; // or tls.accept(tcp)
//! # Ok(()) }
//! ```

mod context;
mod handshake;
pub mod identity;
mod material;
mod reload;
pub mod settings;
mod validity;
mod verify;

#[cfg(test)]
mod tests;

pub use context::{ReloadStats, TlsContext, ALPN_H2};
pub use handshake::{HandshakeError, HANDSHAKE_TIMEOUT};
pub use identity::{IdentityMismatch, IdentityPattern, PatternError, PeerIdentity, PeerPatterns};
pub use material::{TlsError, EXPIRY_WARNING_SECONDS};
pub use reload::ReloadOutcome;
pub use settings::{TlsMode, TlsSettings};
