//! Looking up a route's name, with the answer kept a few seconds.
//!
//! A name route (`ps-0.training.svc:2222`) is looked up when a connection
//! needs it, after its opening bytes, never at accept. Connections that
//! arrive together (TensorFlow opens several at a step's start, a health
//! checker every few seconds) share one answer for [`TTL`], so that
//! connections cannot make tlcd flood the resolver; a task that moved is
//! still found within that time. The names come from the configuration
//! (one per route), never from a client, so the cache holds few entries;
//! [`MAX_ENTRIES`] bounds it anyway.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::destination::{Destination, DestinationError};

/// How long an answer is used for new connections.
pub const TTL: Duration = Duration::from_secs(5);

/// Names whose answers are kept at once.
pub const MAX_ENTRIES: usize = 64;

/// A route's resolver: [`Destination::resolve`] with its answers kept for
/// [`TTL`]. Failures are not kept: the next connection asks again.
#[derive(Debug, Default)]
pub struct Resolver {
    answers: Mutex<Answers>,
}

/// Each name's addresses, and when they were looked up.
type Answers = HashMap<Destination, (Instant, Arc<[SocketAddr]>)>;

impl Resolver {
    /// The addresses of `destination`, in the order to try them (never
    /// empty): an address as it is, a name from a fresh kept answer or a
    /// new lookup.
    pub async fn resolve(
        &self,
        destination: &Destination,
    ) -> Result<Arc<[SocketAddr]>, DestinationError> {
        if let Destination::Addr(addr) = destination {
            return Ok(Arc::from([*addr]));
        }
        if let Some((at, addrs)) = self.answers().get(destination) {
            if at.elapsed() < TTL {
                return Ok(addrs.clone());
            }
        }
        let addrs: Arc<[SocketAddr]> = destination.resolve().await?.into();
        let mut answers = self.answers();
        if answers.len() >= MAX_ENTRIES {
            answers.retain(|_, (at, _)| at.elapsed() < TTL);
        }
        if answers.len() >= MAX_ENTRIES {
            let oldest = answers
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                answers.remove(&oldest);
            }
        }
        answers.insert(destination.clone(), (Instant::now(), addrs.clone()));
        Ok(addrs)
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, Answers> {
        // Only whole entries are ever written: a panic elsewhere cannot
        // leave one half-made.
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_kept_for_the_ttl_and_addresses_need_no_lookup() {
        let resolver = Resolver::default();
        let addr: Destination = "127.0.0.1:9".parse().unwrap();
        let name: Destination = "localhost:9".parse().unwrap();
        assert_eq!(
            &*resolver.resolve(&addr).await.unwrap(),
            &["127.0.0.1:9".parse().unwrap()]
        );
        let first = resolver.resolve(&name).await.unwrap();
        let again = resolver.resolve(&name).await.unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the kept answer, no new lookup"
        );
        assert_eq!(resolver.answers().len(), 1);
        let nowhere: Destination = "no-such-host.invalid:9".parse().unwrap();
        assert!(resolver.resolve(&nowhere).await.is_err());
        assert_eq!(resolver.answers().len(), 1, "failures are not kept");
    }
}
