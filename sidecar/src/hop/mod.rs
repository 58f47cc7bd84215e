//! Lossless compression of everything two sidecars exchange that is not
//! an envelope: TensorFlow's control calls, integer tensors, small and
//! dead tensors ([`tlc_wire::hop`] is the format). It pays where a model
//! is not one big dense tensor: embedding ids and indices, rendezvous
//! keys and `RunGraph` calls repeat nearly identically every step.
//!
//! Who does what:
//!
//! - the requester's sidecar marks every call it sends with `tlc-hop` and
//!   restores the messages of an answer that comes back compressed
//!   ([`forward`]). Once a peer has answered with the mark, it also
//!   compresses the requests it sends that peer (up to [`MAX_REQUEST`]
//!   bytes, gathered whole), keeping the original: if the other end turns
//!   out to be TensorFlow itself (it refuses an unknown `grpc-encoding`
//!   before running anything), the call goes again as it came;
//! - the holder's sidecar restores a compressed request whole before
//!   anything reads it ([`restore_request`]), and compresses the messages
//!   of its answer to a marked call ([`compress_response`]).
//!
//! Restoring is always on; compressing follows the policy
//! (`[policy] hop_compression`), so switching it off at either end never
//! strands a compressed message.

pub mod messages;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Request, Response};
use tracing::{debug, warn};

use tlc_proxy::body::{self, Peeked, ProxyBody};
use tlc_proxy::forward::forward as forward_as_is;
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;
use tlc_wire::hop::{self, Counted};
use tlc_wire::peer;

pub use messages::Mode;

/// Largest request gathered to be compressed (or restored): TensorFlow's
/// control requests are a few hundred bytes to a few KB; a larger one
/// (a graph registration) crosses as it is.
pub const MAX_REQUEST: usize = 64 << 10;

/// How long a peer that answered with the mark is trusted to restore
/// compressed requests without answering again.
const PEER_TTL: Duration = Duration::from_secs(300);

/// Peers remembered at most (a job's tasks; more only under attack).
const MAX_PEERS: usize = 4096;

const GRPC_ENCODING: &str = "grpc-encoding";

/// Hop compression's counters, both ways.
#[derive(Debug, Default)]
pub struct HopCounters {
    compressed: [AtomicU64; 3],
    restored: [AtomicU64; 3],
    failures: AtomicU64,
    resent: AtomicU64,
}

/// What [`HopCounters`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HopTotals {
    /// Messages this sidecar compressed (raw = before, wire = after).
    pub compressed: Counted,
    /// Messages this sidecar restored (raw = after, wire = before).
    pub restored: Counted,
    /// Compressed messages or bodies that could not be restored.
    pub failures: u64,
    /// Compressed requests sent again as they came, because the other end
    /// was not a sidecar.
    pub resent: u64,
}

impl HopCounters {
    /// Counts one message of `raw` bytes compressed to `wire`.
    pub fn compressed(&self, raw: usize, wire: usize) {
        add(&self.compressed, raw, wire);
    }

    /// Counts one message of `wire` bytes restored to `raw`.
    pub fn restored(&self, raw: usize, wire: usize) {
        add(&self.restored, raw, wire);
    }

    fn add_counted(&self, to: &[AtomicU64; 3], counted: Counted) {
        to[0].fetch_add(counted.messages, Ordering::Relaxed);
        to[1].fetch_add(counted.raw_bytes, Ordering::Relaxed);
        to[2].fetch_add(counted.wire_bytes, Ordering::Relaxed);
    }

    /// Counts one message or body that could not be restored.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything counted so far.
    pub fn totals(&self) -> HopTotals {
        let read = |c: &[AtomicU64; 3]| Counted {
            messages: c[0].load(Ordering::Relaxed),
            raw_bytes: c[1].load(Ordering::Relaxed),
            wire_bytes: c[2].load(Ordering::Relaxed),
        };
        HopTotals {
            compressed: read(&self.compressed),
            restored: read(&self.restored),
            failures: self.failures.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
        }
    }
}

fn add(to: &[AtomicU64; 3], raw: usize, wire: usize) {
    to[0].fetch_add(1, Ordering::Relaxed);
    to[1].fetch_add(raw as u64, Ordering::Relaxed);
    to[2].fetch_add(wire as u64, Ordering::Relaxed);
}

/// The upstreams that answered as sidecars lately, and when.
#[derive(Debug, Default)]
pub struct Peers {
    seen: Mutex<HashMap<SocketAddr, Instant>>,
}

impl Peers {
    fn knows(&self, addr: SocketAddr, now: Instant) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(&addr)
            .is_some_and(|at| now.saturating_duration_since(*at) < PEER_TTL)
    }

    fn saw(&self, addr: SocketAddr, now: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= MAX_PEERS && !seen.contains_key(&addr) {
            seen.retain(|_, at| now.saturating_duration_since(*at) < PEER_TTL);
            if seen.len() >= MAX_PEERS {
                return;
            }
        }
        seen.insert(addr, now);
    }

    fn forget(&self, addr: SocketAddr) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr);
    }
}

/// The requester's side: sends `request` to `upstream` marked as a
/// sidecar's, compressed if `compress` and the upstream is a known
/// sidecar, and hands back the answer restored.
pub async fn forward(
    peers: &Peers,
    counters: &Arc<HopCounters>,
    compress: bool,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let addr = upstream.addr();
    let (mut parts, body) = request.into_parts();
    peer::mark_hop(&mut parts.headers);
    let mut original = None;
    let body = if compress && peers.knows(addr, Instant::now()) && plain(&parts.headers) {
        match body::peek(body, MAX_REQUEST).await {
            Ok(Peeked::Whole(collected)) => {
                let data = collected.to_bytes();
                match hop::compress_body(&data) {
                    Some((packed, counted)) => {
                        counters.add_counted(&counters.compressed, counted);
                        original = Some((copy_head(&parts), data, collected.trailers.clone()));
                        parts.headers.remove(CONTENT_LENGTH);
                        parts
                            .headers
                            .insert(GRPC_ENCODING, HeaderValue::from_static(hop::ENCODING));
                        body::chunks(vec![Bytes::from(packed)], collected.trailers)
                    }
                    None => body::chunks(vec![data], collected.trailers),
                }
            }
            Ok(partial) => partial.into_body(),
            Err(err) => {
                return grpc_status::response(
                    grpc_status::UNAVAILABLE,
                    &format!("tlcd: reading the request: {err}"),
                )
            }
        }
    } else {
        body
    };
    let response = forward_as_is(upstream, Request::from_parts(parts, body)).await;
    if peer::speaks_hop(response.headers()) {
        peers.saw(addr, Instant::now());
        return restore_response(response, counters);
    }
    let Some((head, data, trailers)) = original else {
        return response;
    };
    // Compressed, and answered by something that is not a sidecar
    // (TensorFlow refuses an encoding it does not know before running
    // the call): send it again as it came.
    peers.forget(addr);
    counters.resent.fetch_add(1, Ordering::Relaxed);
    warn!(upstream = %addr, status = ?grpc_status_of(response.headers()),
        "a peer that had answered as a sidecar answered as something else; sending the call again uncompressed");
    let again = Request::from_parts(head, body::chunks(vec![data], trailers));
    forward_as_is(upstream, again).await
}

/// The holder's side, before anything reads `request`: restores a
/// compressed request whole. Returns whether the caller is a sidecar that
/// restores compressed answers, or the error answer for a request that
/// cannot be restored.
pub async fn restore_request(
    counters: &HopCounters,
    request: Request<ProxyBody>,
) -> Result<(Request<ProxyBody>, bool), Response<ProxyBody>> {
    let (mut parts, body) = request.into_parts();
    let marked = peer::speaks_hop(&parts.headers);
    if !peer::hop_compressed(&parts.headers) {
        parts.headers.remove(peer::HOP);
        return Ok((Request::from_parts(parts, body), marked));
    }
    parts.headers.remove(peer::HOP);
    parts.headers.remove(GRPC_ENCODING);
    parts.headers.remove(CONTENT_LENGTH);
    let restored = match body::collect(body, MAX_REQUEST).await {
        Ok(collected) => hop::restore_body(&collected.to_bytes(), MAX_REQUEST)
            .map(|(data, counted)| (data, counted, collected.trailers))
            .map_err(|e| e.to_string()),
        Err(err) => Err(err.to_string()),
    };
    match restored {
        Ok((data, counted, trailers)) => {
            counters.add_counted(&counters.restored, counted);
            let body = body::chunks(vec![Bytes::from(data)], trailers);
            Ok((Request::from_parts(parts, body), true))
        }
        Err(err) => {
            counters.failed();
            warn!(path = %parts.uri.path(), error = %err, "cannot restore a peer's compressed request");
            let mut response = grpc_status::response(
                grpc_status::INTERNAL,
                &format!("tlcd: cannot restore the compressed request: {err}"),
            );
            peer::mark_hop(response.headers_mut());
            Err(response)
        }
    }
}

/// The holder's side, answering a call marked by a sidecar: marks the
/// answer, and compresses its messages when `compress` allows and the
/// answer is TensorFlow's plain gRPC (not an envelope, not already
/// encoded).
pub fn compress_response(
    mut response: Response<ProxyBody>,
    counters: &Arc<HopCounters>,
    compress: bool,
) -> Response<ProxyBody> {
    peer::mark_hop(response.headers_mut());
    let headers = response.headers();
    let grpc = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let eligible = compress
        && response.status() == http::StatusCode::OK
        && grpc
        && plain(headers)
        && !peer::has_envelope(headers)
        && grpc_status_of(headers).is_none();
    if !eligible {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(GRPC_ENCODING, HeaderValue::from_static(hop::ENCODING));
    let body = messages::transform(body, Mode::Compress, Arc::clone(counters));
    Response::from_parts(parts, body)
}

/// An answer marked by a sidecar, restored for TensorFlow: the marks
/// removed, compressed messages restored as they stream.
fn restore_response(
    response: Response<ProxyBody>,
    counters: &Arc<HopCounters>,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    let compressed = peer::hop_compressed(&parts.headers);
    parts.headers.remove(peer::HOP);
    if !compressed {
        return Response::from_parts(parts, body);
    }
    parts.headers.remove(GRPC_ENCODING);
    parts.headers.remove(CONTENT_LENGTH);
    debug!("restoring a compressed answer");
    let body = messages::transform(body, Mode::Restore, Arc::clone(counters));
    Response::from_parts(parts, body)
}

/// Whether a call's messages are TensorFlow's own, uncompressed.
fn plain(headers: &HeaderMap) -> bool {
    headers.get(GRPC_ENCODING).is_none_or(|v| v == "identity")
}

/// The `grpc-status` a trailers-only answer carries in its head.
fn grpc_status_of(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get("grpc-status")
}

/// A request head again, for sending a call a second time.
fn copy_head(parts: &http::request::Parts) -> http::request::Parts {
    let mut copy = Request::new(());
    *copy.method_mut() = parts.method.clone();
    *copy.uri_mut() = parts.uri.clone();
    *copy.version_mut() = parts.version;
    *copy.headers_mut() = parts.headers.clone();
    copy.headers_mut().remove(GRPC_ENCODING);
    copy.into_parts().0
}
