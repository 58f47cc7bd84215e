//! What the proxy asks of whoever decides a call's fate.
//!
//! The proxy accepts connections, speaks HTTP/2 on both sides, bounds what
//! clients may hold and closes connections without losing a byte; it knows
//! nothing of tensors. Each call it accepts goes to a [`Handler`] together
//! with the upstream of its connection; the handler answers it, usually by
//! calling [`crate::forward::forward`] with the request as it is or changed.

use std::future::Future;
use std::sync::Arc;

use http::{Request, Response};
use tlc_core::Role;

use crate::body::ProxyBody;
use crate::connection::ConnectionStats;
use crate::tls::TlsContext;
use crate::upstream::Upstream;

/// Decides what happens to each call the proxy accepts.
pub trait Handler: Send + Sync + 'static {
    /// Answers one call that arrived on a listener of `role`; `upstream` is
    /// where its connection forwards to. The request carries
    /// [`crate::connection::ConnectionId`] and, from a client that is not
    /// authenticated where TLS is configured, [`Unauthenticated`] in its
    /// extensions; from a peer that proved itself by mutual TLS, its
    /// [`crate::tls::PeerIdentity`].
    fn handle(
        self: Arc<Self>,
        role: Role,
        upstream: &Upstream,
        request: Request<ProxyBody>,
    ) -> impl Future<Output = Response<ProxyBody>> + Send;

    /// The counters of the connections the proxy serves for this handler.
    fn connections(&self) -> &ConnectionStats;

    /// Called once mutual TLS is loaded, so that the handler can report on
    /// it (certificate expiry, reloads). Nothing by default.
    fn tls_loaded(&self, _tls: &Arc<TlsContext>) {}
}

/// Request extension: the call came in plaintext on a listener where peers
/// must use TLS, so nothing it claims about itself may be trusted.
#[derive(Debug, Clone, Copy)]
pub struct Unauthenticated;
