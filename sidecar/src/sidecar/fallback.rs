//! The way back from a compressed response that cannot be used.
//!
//! The holder side keeps the original response of every envelope it sent
//! for a while, under the envelope's fallback token. If the requester side
//! cannot decode an envelope, it asks for the original on the same
//! connection (`/tlc.Sidecar/Fallback`), answered by the holder-side
//! sidecar without involving TensorFlow: TensorFlow hands out each tensor
//! once, so the call cannot simply be repeated.
//!
//! An original is kept until the requester says it restored the envelope
//! (its fallback token in `tlc-ack` on a later call), for at
//! most [`MAX_AGE`], and within a byte budget, whichever ends first: what
//! the cache holds follows what requesters may still ask for, not the
//! budget.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};

use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::connection::ConnectionId;
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;
use tlc_wire::peer;

/// Longest an original is kept: a requester that has not asked for it by
/// then (it asks right after the envelope arrives) never will.
pub const MAX_AGE: Duration = Duration::from_secs(60);

/// gRPC status `NOT_FOUND`.
const NOT_FOUND: u16 = 5;

/// One kept response.
struct Kept {
    /// The connection the envelope left on: only that one may take it.
    connection: ConnectionId,
    chunks: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    bytes: usize,
    kept_at: Instant,
}

/// The kept responses by token, their order of arrival, and their size.
#[derive(Default)]
struct Shelf {
    kept: HashMap<u64, Kept>,
    /// Tokens oldest first; taken ones are skipped when met.
    order: VecDeque<u64>,
    bytes: usize,
}

impl Shelf {
    /// Takes the response kept under `token` off the shelf, and its bytes
    /// off the count.
    fn remove(&mut self, token: u64) -> Option<Kept> {
        let kept = self.kept.remove(&token)?;
        self.bytes -= kept.bytes;
        Some(kept)
    }
}

/// Original responses by token, the oldest dropped first beyond a byte
/// budget.
///
/// Tokens are random 64-bit numbers (from the operating system's random
/// source), and a response is handed only to a fallback call on the
/// connection its envelope went out on: another client of the inbound
/// port can neither guess a token nor use one it has seen.
pub struct FallbackCache {
    shelf: Mutex<Shelf>,
    budget: usize,
}

impl FallbackCache {
    /// A cache holding at most `budget` bytes of responses.
    pub fn new(budget: usize) -> FallbackCache {
        FallbackCache {
            shelf: Mutex::new(Shelf::default()),
            budget,
        }
    }

    /// A token for the next envelope: random, so that it cannot be guessed
    /// from the tokens of other envelopes.
    pub fn token(&self) -> u64 {
        // Without the OS's random source (never seen on Linux) a hashed
        // seed is still unpredictable enough, and the connection check
        // below does not depend on it.
        getrandom::u64().unwrap_or_else(|_| tlc_context::pull::random_seed())
    }

    /// Keeps a response (its chunks are shared, not copied) under `token`,
    /// for `connection`. A response larger than the whole budget is not
    /// kept: its envelope has no fallback, which the requester reports.
    pub fn keep(
        &self,
        token: u64,
        connection: ConnectionId,
        chunks: Vec<Bytes>,
        trailers: Option<HeaderMap>,
    ) {
        let bytes = chunks.iter().map(Bytes::len).sum();
        if bytes > self.budget {
            return;
        }
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let kept = Kept {
            connection,
            chunks,
            trailers,
            bytes,
            kept_at: now,
        };
        if let Some(replaced) = shelf.kept.insert(token, kept) {
            shelf.bytes -= replaced.bytes;
        }
        shelf.bytes += bytes;
        shelf.order.push_back(token);
        while let Some(&oldest) = shelf.order.front() {
            let expired = shelf
                .kept
                .get(&oldest)
                .is_none_or(|k| now.saturating_duration_since(k.kept_at) > MAX_AGE);
            if shelf.bytes <= self.budget && !expired {
                break;
            }
            shelf.order.pop_front();
            shelf.remove(oldest);
        }
        // Tokens taken earlier linger in `order`; drop them once they are
        // most of it, so it stays proportional to what is kept.
        if shelf.order.len() > 2 * shelf.kept.len() + 64 {
            let Shelf { kept, order, .. } = &mut *shelf;
            order.retain(|t| kept.contains_key(t));
        }
    }

    /// The response kept under `token` for `connection`, if it is still
    /// there. Asked from another connection, it stays for its owner.
    pub fn take(
        &self,
        token: u64,
        connection: ConnectionId,
    ) -> Option<(Vec<Bytes>, Option<HeaderMap>)> {
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        if shelf.kept.get(&token)?.connection != connection {
            return None;
        }
        let kept = shelf.remove(token)?;
        Some((kept.chunks, kept.trailers))
    }

    /// Drops the originals of `tokens`: the requester restored their
    /// envelopes. Returns how many were dropped. Whichever connection says
    /// so: a requester's sidecar may reach this one on several (one per
    /// connection its TensorFlow opened), and a release only drops what
    /// its tokens name, which are random and unguessable; it hands nothing
    /// out.
    pub fn release(&self, tokens: &[u64]) -> usize {
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        tokens
            .iter()
            .filter(|token| shelf.remove(**token).is_some())
            .count()
    }

    /// Responses kept now, and their bytes.
    pub fn len_and_bytes(&self) -> (usize, usize) {
        let shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        (shelf.kept.len(), shelf.bytes)
    }

    /// Answers a fallback call from a peer sidecar.
    pub fn serve(&self, request: &Request<ProxyBody>) -> Response<ProxyBody> {
        let token = request
            .headers()
            .get(peer::FALLBACK)
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.len() <= 16)
            .and_then(|v| u64::from_str_radix(v, 16).ok());
        let Some(token) = token else {
            return grpc_status::response(grpc_status::INTERNAL, "tlcd: fallback without a token");
        };
        let connection = ConnectionId::of(request);
        match connection.and_then(|c| self.take(token, c)) {
            Some((chunks, trailers)) => {
                let mut response = Response::new(body::chunks(chunks, trailers));
                response
                    .headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/grpc"));
                response
            }
            // The same answer whether the token is unknown, gone or another
            // connection's: nothing to learn from asking.
            None => grpc_status::response(
                NOT_FOUND,
                &format!("tlcd: response {token:x} is not kept for this connection"),
            ),
        }
    }
}

/// Asks the holder-side sidecar behind `upstream` for the original of the
/// envelope with `token`. Returns the response as it should reach TensorFlow.
pub async fn fetch(upstream: &Upstream, token: u64) -> Result<Response<ProxyBody>, String> {
    let request = Request::post(format!("http://{}{}", upstream.addr(), peer::FALLBACK_PATH))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(peer::PEER, peer::PROTOCOL)
        .header(peer::FALLBACK, format!("{token:x}"))
        .body(body::empty())
        .map_err(|e| e.to_string())?;
    let mut sender = upstream.sender().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(status) = response.headers().get("grpc-status") {
        // A trailers-only answer: the response is gone or the call failed.
        return Err(format!(
            "peer answered grpc-status {}",
            String::from_utf8_lossy(status.as_bytes())
        ));
    }
    // Read it whole: only a complete, successful response may reach TensorFlow.
    let (parts, response_body) = response.into_parts();
    let collected = body::collect(response_body, super::MAX_RESPONSE)
        .await
        .map_err(|e| e.to_string())?;
    let status = collected
        .trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if status.as_deref() != Some("0") {
        return Err(format!("peer's fallback ended with grpc-status {status:?}"));
    }
    tlc_wire::tf::grpc::parse_single(collected.to_bytes(), super::MAX_RESPONSE)
        .map_err(|e| format!("peer's fallback is not one gRPC message: {e}"))?;
    Ok(Response::from_parts(
        parts,
        body::chunks(collected.chunks, collected.trailers),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ConnectionId = ConnectionId(1);
    const B: ConnectionId = ConnectionId(2);

    #[test]
    fn oldest_go_first_beyond_the_budget() {
        let cache = FallbackCache::new(10);
        let (a, b, c) = (1, 2, 3);
        cache.keep(a, A, vec![Bytes::from_static(b"123456")], None);
        cache.keep(b, A, vec![Bytes::from_static(b"1234")], None);
        cache.keep(c, A, vec![Bytes::from_static(b"12345")], None);
        assert!(
            cache.take(a, A).is_none(),
            "6 + 4 + 5 > 10: the oldest goes"
        );
        assert!(cache.take(b, A).is_some());
        assert_eq!(
            cache.take(c, A).unwrap().0,
            vec![Bytes::from_static(b"12345")]
        );
        assert!(cache.take(c, A).is_none(), "taken once");
        assert_eq!(cache.len_and_bytes(), (0, 0));
    }

    #[test]
    fn only_the_envelopes_connection_takes_its_original() {
        let cache = FallbackCache::new(100);
        cache.keep(7, A, vec![Bytes::from_static(b"tensor")], None);
        assert!(cache.take(7, B).is_none(), "another connection");
        assert!(cache.take(8, A).is_none(), "another token");
        assert!(cache.take(7, A).is_some(), "the owner still gets it");
    }

    #[test]
    fn acked_originals_go_and_the_rest_stay_for_their_owner() {
        let cache = FallbackCache::new(100);
        cache.keep(1, A, vec![Bytes::from_static(b"one")], None);
        cache.keep(2, A, vec![Bytes::from_static(b"two")], None);
        assert_eq!(cache.release(&[1, 3]), 1, "an unknown token drops nothing");
        assert_eq!(cache.len_and_bytes(), (1, 3));
        assert!(cache.take(1, A).is_none());
        assert!(cache.take(2, B).is_none(), "still only for its connection");
        assert!(cache.take(2, A).is_some());
    }

    #[test]
    fn a_response_larger_than_the_budget_is_not_kept() {
        let cache = FallbackCache::new(4);
        cache.keep(1, A, vec![Bytes::from_static(b"1234")], None);
        cache.keep(2, A, vec![Bytes::from_static(b"12345")], None);
        assert_eq!(cache.len_and_bytes(), (1, 4), "the old one stays");
        assert!(cache.take(2, A).is_none());
    }

    #[test]
    fn tokens_are_not_a_sequence() {
        let cache = FallbackCache::new(4);
        let tokens: Vec<u64> = (0..64).map(|_| cache.token()).collect();
        let mut sorted = tokens.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 64, "no repeats");
        let steps = tokens
            .windows(2)
            .filter(|w| w[1].wrapping_sub(w[0]) < 1 << 32);
        assert!(steps.count() < 4, "consecutive tokens are not close");
    }

    #[test]
    fn the_order_queue_stays_proportional_to_what_is_kept() {
        let cache = FallbackCache::new(1 << 20);
        for token in 0..10_000 {
            cache.keep(token, A, vec![Bytes::from_static(b"x")], None);
            assert!(cache.take(token, A).is_some());
        }
        let shelf = cache.shelf.lock().unwrap();
        assert!(shelf.order.len() <= 2 * shelf.kept.len() + 65);
    }
}
