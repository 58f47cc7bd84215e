//! A listener's connections that do not speak HTTP/2: bounded in number
//! (`limits.max_opaque_connections` of the listener's slots, so that they
//! can never take the slots TensorFlow and peer sidecars need), then
//! forwarded untouched ([`crate::opaque`]) within their idle and close
//! times, and counted.

use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn};

use super::Site;
use crate::connection::{self, Cut, Refusal};
use crate::handler::Handler;
use crate::intercept::Destination;
use crate::opaque::{self, CopyBounds, Dial, Ended, OpaqueError};
use crate::tls::TlsContext;

/// One of the listener's slots for connections forwarded untouched, or
/// `None` (counted, logged) when they are all taken.
pub(super) fn slot<H: Handler>(site: &Site<H>) -> Option<OwnedSemaphorePermit> {
    match Arc::clone(&site.opaque).try_acquire_owned() {
        Ok(slot) => Some(slot),
        Err(_) => {
            site.handler.connections().refused(Refusal::OpaqueLimit);
            if connection::warn_allowed() {
                warn!(listen = %site.route.listen, max = site.bounds.max_opaque_connections,
                    "connection that is not HTTP/2 refused: the listener forwards \
                     limits.max_opaque_connections already");
            }
            None
        }
    }
}

/// Forwards `client` to `destination` as it is, holding `slot`: in TLS
/// when `tls` is given (to a peer's sidecar). A client that has sent no
/// byte at the handshake time (counted from `accepted`) is closed.
pub(super) async fn forward<H, S>(
    client: S,
    slot: OwnedSemaphorePermit,
    site: &Site<H>,
    destination: &Destination,
    tls: Option<Arc<TlsContext>>,
    accepted: Instant,
) where
    H: Handler,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stats = site.handler.connections();
    let Some(addrs) = site.addrs(destination).await else {
        return;
    };
    let addr = addrs[0];
    stats.opaque();
    if connection::warn_allowed() {
        info!(%addr, "a connection that is not HTTP/2 is forwarded untouched (nothing compressed)");
    }
    let open = stats.open();
    let dial = Dial {
        addr,
        timeout: site.bounds.handshake,
        tls,
    };
    let bounds = CopyBounds {
        idle: site.bounds.opaque_idle,
        close: site.bounds.close,
        first_byte: Some(site.bounds.handshake.saturating_sub(accepted.elapsed())),
    };
    match opaque::forward(client, &dial, bounds, &site.lifecycle).await {
        Ok((ended, copied)) => {
            match ended {
                Ended::Idle => stats.cut(Cut::OpaqueIdle),
                Ended::HalfClosed => stats.cut(Cut::HalfClosed),
                Ended::NoFirstByte => stats.refused(Refusal::Handshake),
                Ended::Closed | Ended::Shutdown | Ended::Failed(_) => {}
            }
            debug!(?ended, ?copied, "forwarded connection ended");
        }
        Err(err) => {
            stats.refused(Refusal::Upstream);
            if matches!(err, OpaqueError::Tls { .. }) && connection::warn_allowed() {
                warn!(error = %err, "cannot carry a connection that is not HTTP/2 to the peer's sidecar over TLS; closing it");
            } else {
                debug!(error = %err, "cannot forward a connection that is not HTTP/2");
            }
        }
    }
    drop(open);
    drop(slot);
}
