//! Where a connection should go: a fixed upstream (explicit mode: an
//! address, or a name looked up once the connection has said what it is,
//! see [`destination`] and [`resolver`]) or its original destination
//! before iptables redirected it (transparent mode).

pub mod destination;
pub mod original_dst;
pub mod resolver;

pub use destination::{Destination, DestinationError};
pub use resolver::Resolver;

use std::net::SocketAddr;

use thiserror::Error;
use tokio::net::TcpStream;

/// Where a listener sends the connections it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Always this destination (explicit mode).
    Fixed(Destination),
    /// Wherever the connection was going before iptables redirected it.
    OriginalDestination,
}

/// The upstream of a connection could not be determined.
#[derive(Debug, Error)]
pub enum TargetError {
    /// The connection was not redirected (someone dialled the sidecar port
    /// directly), so there is nowhere to send it.
    #[error("connection was not redirected by iptables (no original destination): {0}")]
    NotRedirected(std::io::Error),
    /// The original destination is the sidecar itself: forwarding would loop.
    #[error("original destination {0} is this listener; refusing to loop")]
    Loop(SocketAddr),
    /// The route's name did not resolve.
    #[error(transparent)]
    Resolve(#[from] DestinationError),
}

/// Where to forward `stream`, accepted by a listener with `target`: an
/// address, or a name to look up (with a [`Resolver`]) only once the
/// connection is worth it. Nothing is looked up here, so a socket that
/// says nothing costs no lookup.
pub fn destination_of(stream: &TcpStream, target: &Target) -> Result<Destination, TargetError> {
    match target {
        Target::Fixed(destination) => Ok(destination.clone()),
        Target::OriginalDestination => {
            let dst = original_dst::original_dst(stream).map_err(TargetError::NotRedirected)?;
            match stream.local_addr() {
                Ok(local) if local == dst => Err(TargetError::Loop(dst)),
                _ => Ok(Destination::Addr(dst)),
            }
        }
    }
}
