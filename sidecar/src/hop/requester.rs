//! The requester's side of hop compression: every call marked, requests
//! to a known sidecar compressed (against the previous one of the same
//! call where the holder keeps it, the method by its short path where the
//! holder restores them), answers restored.
//!
//! TensorFlow's request is gathered whole to be compressed only within the
//! in-flight budget and `limits.gather_seconds`; one that is not goes on
//! as it came. An answer restores to at most `limits.max_tensor_mib`
//! ([`messages`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Request, Response};
use tracing::{debug, warn};

use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::forward::forward as forward_as_is;
use tlc_proxy::grpc_status;
use tlc_proxy::limits::budget::Charge;
use tlc_proxy::upstream::Upstream;
use tlc_wire::hop;
use tlc_wire::peer;
use tlc_wire::short_path;

use super::gather::{gather, Gathered};
use super::messages;
use super::references::{single_message, SentKey};
use super::{
    copy_head, grpc_status_of, plain, set_path, Hop, HopCounters, HopLimits, GRPC_ENCODING,
    HOP_AGAIN, MAX_REQUEST,
};

/// A request gathered whole to be compressed: what it takes to send it
/// again, and the reference it may become.
struct Whole {
    head: http::request::Parts,
    data: Bytes,
    trailers: Option<http::HeaderMap>,
    /// Which earlier request it is compared with; `None` for a body that
    /// is not one small message.
    key: Option<SentKey>,
    /// Whether the holder's sidecar restores short method paths.
    short_paths: bool,
    /// `data`'s charge to the in-flight budget, held with it.
    _charge: Charge,
}

impl Whole {
    /// The request to send: compressed against `reference` (its id and
    /// bytes) where that shrinks it, marked as such, its method by a short
    /// path where the holder restores them; and whether it was compressed.
    fn request(
        &self,
        reference: Option<(u64, Bytes)>,
        counters: &HopCounters,
    ) -> (Request<ProxyBody>, bool) {
        let mut head = copy_head(&self.head);
        if self.short_paths {
            shorten_path(&mut head);
        }
        let packed = hop::compress_body_with(&self.data, reference.as_ref().map(|(_, r)| &r[..]));
        let compressed = packed.is_some();
        let body = match packed {
            Some((packed, counted)) => {
                counters.count_compressed(counted);
                head.headers.remove(CONTENT_LENGTH);
                head.headers
                    .insert(GRPC_ENCODING, HeaderValue::from_static(hop::ENCODING));
                if let Some((id, _)) = reference {
                    head.headers
                        .insert(peer::HOP_REF, peer::reference_header(id));
                }
                Bytes::from(packed)
            }
            None => self.data.clone(),
        };
        let body = if compressed {
            // The holder's sidecar restores it whole and needs no length.
            body::chunks_unsized(vec![body], self.trailers.clone())
        } else {
            body::chunks(vec![body], self.trailers.clone())
        };
        (Request::from_parts(head, body), compressed)
    }

    /// The request as it came.
    fn original(&self) -> Request<ProxyBody> {
        Request::from_parts(
            copy_head(&self.head),
            body::chunks(vec![self.data.clone()], self.trailers.clone()),
        )
    }
}

/// Sends `request` to `upstream` marked as a sidecar's, compressed if
/// `compress` and the upstream is a known sidecar, and hands back the
/// answer restored.
pub async fn forward(
    hop: &Hop,
    counters: &Arc<HopCounters>,
    compress: bool,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let addr = upstream.addr();
    let (mut parts, body) = request.into_parts();
    peer::mark_hop(&mut parts.headers);
    let known = hop.peers.knows(addr, Instant::now());
    if !(compress && known.sidecar && plain(&parts.headers)) {
        let response = forward_as_is(upstream, Request::from_parts(parts, body)).await;
        return answered(hop, counters, upstream, response);
    }
    match gathered(hop, counters, upstream, (parts, body), known.short_paths).await {
        Ok(whole) => send_compressed(hop, counters, upstream, whole).await,
        Err(response) => response,
    }
}

/// The request read whole, to compress; else (too long, the budget spent,
/// TensorFlow slow to send it) the answer to it sent as it came, or to a
/// body that could not be read.
async fn gathered(
    hop: &Hop,
    counters: &Arc<HopCounters>,
    upstream: &Upstream,
    (parts, body): (http::request::Parts, ProxyBody),
    short_paths: bool,
) -> Result<Whole, Response<ProxyBody>> {
    let addr = upstream.addr();
    let deadline = Instant::now() + hop.limits.gather;
    match gather(body, MAX_REQUEST, &hop.limits.budget, deadline).await {
        Ok(Gathered::Whole(collected, charge)) => {
            let data = collected.to_bytes();
            let key = single_message(&data).map(|m| SentKey::of(addr, parts.uri.path(), m));
            Ok(Whole {
                head: copy_head(&parts),
                data,
                trailers: collected.trailers,
                key,
                short_paths,
                _charge: charge,
            })
        }
        Ok(Gathered::Stopped(why, partial)) => {
            // Too long, the budget spent or TensorFlow slow to send it:
            // on uncompressed, as it came.
            debug!(upstream = %addr, ?why, "request not gathered; sending it as it comes");
            let request = Request::from_parts(parts, partial.into_body());
            let response = forward_as_is(upstream, request).await;
            Err(answered(hop, counters, upstream, response))
        }
        Err(err) => Err(grpc_status::response(
            grpc_status::UNAVAILABLE,
            &format!("tlcd: reading the request: {err}"),
        )),
    }
}

/// Sends a gathered request compressed (by reference where the holder's
/// sidecar holds the last one), again with the full path or without the
/// reference where the holder's sidecar asks, and as it came where the
/// holder will not take it compressed or is no sidecar after all.
async fn send_compressed(
    hop: &Hop,
    counters: &Arc<HopCounters>,
    upstream: &Upstream,
    mut gathered: Whole,
) -> Response<ProxyBody> {
    let addr = upstream.addr();
    let reference = gathered.key.as_ref().and_then(|k| hop.sent.get(k));
    let referenced = reference.is_some();
    let (request, mut compressed) = gathered.request(reference.clone(), counters);
    let mut response = forward_as_is(upstream, request).await;
    // The holder refusing to hold it answers UNIMPLEMENTED too: not a path.
    let held_back = response.headers().contains_key(HOP_AGAIN);
    if gathered.short_paths && unimplemented(&response) && !held_back {
        // A sidecar that does not know this short path (an older build
        // since restarted there): again with the full one.
        debug!(upstream = %addr, "short path not known; sending the request again with the full one");
        hop.peers.no_short_paths(addr);
        gathered.short_paths = false;
        let (request, again) = gathered.request(reference, counters);
        compressed = again;
        response = forward_as_is(upstream, request).await;
    }
    if referenced && response.headers().contains_key(peer::HOP_MISS) {
        // The holder's sidecar no longer has the reference: again without.
        debug!(upstream = %addr, "reference missed; sending the request again without");
        counters.reference_missed();
        if let Some(key) = &gathered.key {
            hop.sent.forget(key);
        }
        let (request, again) = gathered.request(None, counters);
        compressed = again;
        response = forward_as_is(upstream, request).await;
    }
    if peer::speaks_hop(response.headers()) {
        if let (Some(key), Some(message)) = (gathered.key, single_message(&gathered.data)) {
            // A copy: a slice would keep the whole buffer it was read
            // into, which the references' bound does not count.
            hop.sent.remember(key, Bytes::copy_from_slice(message));
        }
        return answered(hop, counters, upstream, response);
    }
    if compressed && response.headers().contains_key(HOP_AGAIN) {
        // The holder's sidecar could not hold it compressed (its budget,
        // its gather time): again as it came, still a known sidecar.
        debug!(upstream = %addr, "the holder refused the compressed request; sending it again uncompressed");
        counters.resent.fetch_add(1, Ordering::Relaxed);
        let response = forward_as_is(upstream, gathered.original()).await;
        return answered(hop, counters, upstream, response);
    }
    if compressed && response.headers().contains_key("grpc-status") {
        // Compressed, and answered by something that is not a sidecar
        // (TensorFlow refuses an encoding it does not know before running
        // the call): send it again as it came.
        hop.peers.forget(addr);
        counters.resent.fetch_add(1, Ordering::Relaxed);
        warn!(upstream = %addr, status = ?grpc_status_of(response.headers()),
            "a peer that had answered as a sidecar answered as something else; sending the call again uncompressed");
        return forward_as_is(upstream, gathered.original()).await;
    }
    response
}

/// An answer from `addr`: a sidecar's is restored, and the peer noted.
fn answered(
    hop: &Hop,
    counters: &Arc<HopCounters>,
    upstream: &Upstream,
    response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    if peer::speaks_hop(response.headers()) {
        let addr = upstream.addr();
        // A sidecar: its connection's later calls may share a session.
        upstream.peer_is_sidecar();
        let short_paths = peer::restores_short_paths(response.headers());
        hop.peers.saw(addr, short_paths, Instant::now());
        return restore_response(response, counters, &hop.limits, addr);
    }
    response
}

/// Replaces a known method's path by its short path.
fn shorten_path(head: &mut http::request::Parts) {
    if let Some(short) = short_path::shorten(head.uri.path()) {
        // A path of the table always makes a valid URI; if not, the full one goes.
        let _ = set_path(&mut head.uri, short);
    }
}

/// Whether `response` is a trailers-only `UNIMPLEMENTED`.
fn unimplemented(response: &Response<ProxyBody>) -> bool {
    grpc_status_of(response.headers())
        .and_then(|status| status.to_str().ok()?.parse::<u16>().ok())
        .is_some_and(|code| code == grpc_status::UNIMPLEMENTED)
}

/// An answer marked by a sidecar, restored for TensorFlow: the marks
/// removed, compressed messages restored as they stream.
pub(super) fn restore_response(
    response: Response<ProxyBody>,
    counters: &Arc<HopCounters>,
    limits: &HopLimits,
    peer: std::net::SocketAddr,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    let compressed = peer::hop_compressed(&parts.headers);
    parts.headers.remove(peer::HOP);
    parts.headers.remove(peer::HOP_PATHS);
    if !compressed {
        return Response::from_parts(parts, body);
    }
    parts.headers.remove(GRPC_ENCODING);
    parts.headers.remove(CONTENT_LENGTH);
    debug!("restoring a compressed answer");
    let body = messages::restore(body, Arc::clone(counters), limits, peer);
    Response::from_parts(parts, body)
}
