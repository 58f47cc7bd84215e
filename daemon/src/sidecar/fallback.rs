//! The way back from a compressed response that cannot be used.
//!
//! The holder side keeps the original response of every envelope it sent
//! for a while, under the envelope's fallback token. If the requester side
//! cannot decode an envelope, it asks for the original on the same
//! connection (`/tlc.Sidecar/Fallback`), answered by the holder-side
//! sidecar without involving TensorFlow: TensorFlow hands out each tensor
//! once, so the call cannot simply be repeated.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};

use crate::peer;
use crate::proxy::body::{self, ProxyBody};
use crate::proxy::grpc_status;
use crate::proxy::upstream::Upstream;

/// gRPC status `NOT_FOUND`.
const NOT_FOUND: u16 = 5;

/// One kept response.
struct Kept {
    token: u64,
    chunks: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    bytes: usize,
}

/// The kept responses, oldest first, and their total size.
#[derive(Default)]
struct Shelf {
    kept: VecDeque<Kept>,
    bytes: usize,
}

/// Original responses by token, the oldest dropped first beyond a byte budget.
pub struct FallbackCache {
    shelf: Mutex<Shelf>,
    budget: usize,
    next_token: AtomicU64,
}

impl FallbackCache {
    /// A cache holding at most `budget` bytes of responses; tokens start at
    /// `seed` so that a restarted sidecar does not reuse its old tokens.
    pub fn new(budget: usize, seed: u64) -> FallbackCache {
        FallbackCache {
            shelf: Mutex::new(Shelf::default()),
            budget,
            next_token: AtomicU64::new(seed),
        }
    }

    /// A token for the next envelope.
    pub fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Keeps a response (its chunks are shared, not copied) under `token`.
    pub fn keep(&self, token: u64, chunks: Vec<Bytes>, trailers: Option<HeaderMap>) {
        let bytes = chunks.iter().map(Bytes::len).sum();
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        shelf.bytes += bytes;
        shelf.kept.push_back(Kept {
            token,
            chunks,
            trailers,
            bytes,
        });
        // Keep at least the newest one, however large.
        while shelf.bytes > self.budget && shelf.kept.len() > 1 {
            if let Some(old) = shelf.kept.pop_front() {
                shelf.bytes -= old.bytes;
            }
        }
    }

    /// The response kept under `token`, if it is still there.
    pub fn take(&self, token: u64) -> Option<(Vec<Bytes>, Option<HeaderMap>)> {
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        let at = shelf.kept.iter().position(|k| k.token == token)?;
        let kept = shelf.kept.remove(at)?;
        shelf.bytes -= kept.bytes;
        Some((kept.chunks, kept.trailers))
    }

    /// Answers a fallback call from a peer sidecar.
    pub fn serve(&self, request: &Request<ProxyBody>) -> Response<ProxyBody> {
        let token = request
            .headers()
            .get(peer::FALLBACK)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| u64::from_str_radix(v, 16).ok());
        let Some(token) = token else {
            return grpc_status::response(grpc_status::INTERNAL, "tlcd: fallback without a token");
        };
        match self.take(token) {
            Some((chunks, trailers)) => {
                let mut response = Response::new(body::chunks(chunks, trailers));
                response
                    .headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/grpc"));
                response
            }
            None => grpc_status::response(
                NOT_FOUND,
                &format!("tlcd: response {token:x} is no longer kept"),
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
    crate::tf::grpc::parse_single(collected.to_bytes(), super::MAX_RESPONSE)
        .map_err(|e| format!("peer's fallback is not one gRPC message: {e}"))?;
    Ok(Response::from_parts(
        parts,
        body::chunks(collected.chunks, collected.trailers),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_go_first_beyond_the_budget() {
        let cache = FallbackCache::new(10, 7);
        let (a, b, c) = (cache.token(), cache.token(), cache.token());
        assert_eq!((a, b, c), (7, 8, 9));
        cache.keep(a, vec![Bytes::from_static(b"123456")], None);
        cache.keep(b, vec![Bytes::from_static(b"1234")], None);
        cache.keep(c, vec![Bytes::from_static(b"12345")], None);
        assert!(cache.take(a).is_none(), "6 + 4 + 5 > 10: the oldest goes");
        assert!(cache.take(b).is_some());
        assert_eq!(cache.take(c).unwrap().0, vec![Bytes::from_static(b"12345")]);
        assert!(cache.take(c).is_none(), "taken once");
    }
}
