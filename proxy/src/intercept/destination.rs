//! Where an explicit route forwards: an address, or a DNS name with a port
//! (`ps-0.training.svc:2222`, a VM's name across regions), looked up again
//! for new connections (the route's resolver keeps an answer for the
//! next few seconds), so that a task that moved is found where it is now.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How long one lookup of a name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Names looked up so far by this process, every route together: what
/// tests read to see that a connection cost a lookup, or none.
static LOOKUPS: AtomicU64 = AtomicU64::new(0);

/// Names looked up so far by this process (see [`Destination::resolve`]).
pub fn lookups() -> u64 {
    LOOKUPS.load(Ordering::Relaxed)
}

/// An explicit route's upstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Destination {
    /// This address.
    Addr(SocketAddr),
    /// This name, resolved for new connections, and this port.
    Name {
        /// The host name.
        host: Arc<str>,
        /// The port.
        port: u16,
    },
}

/// A destination that cannot be written down or looked up.
#[derive(Debug, Error)]
pub enum DestinationError {
    /// Not `IP:PORT`, `[IPv6]:PORT` nor `NAME:PORT`.
    #[error("'{0}': expected IP:PORT, [IPv6]:PORT or NAME:PORT")]
    Syntax(String),
    /// The name did not resolve.
    #[error("cannot resolve {name}: {source}")]
    Resolve {
        /// `NAME:PORT`.
        name: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// The name resolved to no address, or not within [`RESOLVE_TIMEOUT`].
    #[error("{0} resolved to no address within {RESOLVE_TIMEOUT:?}")]
    NoAddress(String),
}

impl Destination {
    /// The addresses to dial now, in the order to try them: the address
    /// itself, or the name's addresses as the resolver gives them at this
    /// moment (never empty).
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>, DestinationError> {
        match self {
            Destination::Addr(addr) => Ok(vec![*addr]),
            Destination::Name { host, port } => {
                let name = format!("{host}:{port}");
                LOOKUPS.fetch_add(1, Ordering::Relaxed);
                let lookup = tokio::net::lookup_host((host.as_ref(), *port));
                match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Err(_) => Err(DestinationError::NoAddress(name)),
                    Ok(Err(source)) => Err(DestinationError::Resolve { name, source }),
                    Ok(Ok(addrs)) => {
                        let addrs: Vec<SocketAddr> = addrs.collect();
                        if addrs.is_empty() {
                            Err(DestinationError::NoAddress(name))
                        } else {
                            Ok(addrs)
                        }
                    }
                }
            }
        }
    }
}

impl From<SocketAddr> for Destination {
    fn from(addr: SocketAddr) -> Destination {
        Destination::Addr(addr)
    }
}

impl FromStr for Destination {
    type Err = DestinationError;

    fn from_str(text: &str) -> Result<Destination, DestinationError> {
        let text = text.trim();
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Destination::Addr(addr));
        }
        let syntax = || DestinationError::Syntax(text.to_string());
        let (host, port) = text.rsplit_once(':').ok_or_else(syntax)?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(syntax)?;
        // A DNS name: labels of letters, digits and hyphens (underscores
        // too, as some service records have), dot-separated; an IPv6
        // address must come bracketed and parsed above.
        let is_name = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if !is_name {
            return Err(syntax());
        }
        Ok(Destination::Name {
            host: host.into(),
            port,
        })
    }
}

impl TryFrom<String> for Destination {
    type Error = DestinationError;

    fn try_from(text: String) -> Result<Destination, DestinationError> {
        text.parse()
    }
}

impl From<Destination> for String {
    fn from(destination: Destination) -> String {
        destination.to_string()
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Addr(addr) => write!(f, "{addr}"),
            Destination::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_parse_and_print_back() {
        for text in [
            "127.0.0.1:2222",
            "[::1]:2222",
            "ps-0.training.svc:2222",
            "localhost:1",
        ] {
            let parsed: Destination = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        assert!(matches!("10.0.0.5:80".parse(), Ok(Destination::Addr(_))));
        assert!(matches!("tf-ps:80".parse(), Ok(Destination::Name { .. })));
    }

    #[test]
    fn what_is_neither_is_refused() {
        for bad in [
            "",
            "ps-0",
            "ps-0:0",
            "ps-0:65536",
            "::1:80",
            "a b:80",
            "-x:80",
            "ps..svc:80",
            "http://x:80",
        ] {
            assert!(bad.parse::<Destination>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_name_resolves_at_each_call() {
        let name: Destination = "localhost:2222".parse().unwrap();
        let addrs = name.resolve().await.unwrap();
        assert!(
            addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 2222),
            "{addrs:?}"
        );
        let nowhere: Destination = "no-such-host.invalid:2222".parse().unwrap();
        assert!(nowhere.resolve().await.is_err());
    }
}
