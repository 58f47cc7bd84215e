//! The holder's side of hop compression: a compressed request restored
//! whole before anything reads it (small requests kept as references for
//! the next, a short method path put back), the answer to a marked call
//! compressed as it streams.
//!
//! What is gathered is charged to the in-flight budget and must arrive
//! within `limits.gather_seconds`: a compressed request beyond either is
//! refused as TensorFlow refuses an unknown encoding (the requester's
//! sidecar sends it again uncompressed); an uncompressed one beyond them
//! goes on as it came, just not kept as a reference.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Request, Response};
use tracing::warn;

use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::connection::ConnectionId;
use tlc_proxy::grpc_status;
use tlc_wire::hop;
use tlc_wire::peer;
use tlc_wire::short_path;

use super::gather::{gather, Gathered, Stop};
use super::messages;
use super::references::{single_message, MAX_REFERENCE};
use super::{
    grpc_status_of, plain, set_path, Hop, HopCounters, Refusal, GRPC_ENCODING, HOP_AGAIN,
    MAX_REQUEST,
};

/// Before anything reads `request`: restores a compressed request whole,
/// and keeps a small one as a reference. Returns whether the caller is a
/// sidecar that restores compressed answers, or the answer for a request
/// that cannot be restored (a reference this side no longer holds: the
/// requester sends it again without).
pub async fn restore_request(
    hop: &Hop,
    counters: &HopCounters,
    request: Request<ProxyBody>,
) -> Result<(Request<ProxyBody>, bool), Response<ProxyBody>> {
    let connection = ConnectionId::of(&request);
    let (mut parts, body) = request.into_parts();
    let marked = peer::speaks_hop(&parts.headers);
    if marked {
        if let Some(refused) = expand_path(&mut parts) {
            return Err(refused);
        }
    }
    let compressed = peer::hop_compressed(&parts.headers);
    let reference_id = parts
        .headers
        .get(peer::HOP_REF)
        .and_then(peer::parse_reference);
    parts.headers.remove(peer::HOP);
    parts.headers.remove(peer::HOP_REF);
    let (Some(connection), true) = (connection, marked) else {
        return Ok((Request::from_parts(parts, body), marked));
    };
    if !compressed {
        // Read a small request whole: it is the reference for the next.
        return keep_as_reference(hop, counters, connection, (parts, body)).await;
    }
    parts.headers.remove(GRPC_ENCODING);
    parts.headers.remove(CONTENT_LENGTH);
    let reference = match reference_id {
        Some(id) => Some(hop.held.get(connection, id).ok_or_else(reference_missed)?),
        None => None,
    };
    restore_compressed(hop, counters, connection, (parts, body), reference).await
}

/// An uncompressed request from a sidecar, read whole if it is small: it
/// is the reference the sidecar's next request of the same method may be
/// sent against.
async fn keep_as_reference(
    hop: &Hop,
    counters: &HopCounters,
    connection: ConnectionId,
    (parts, body): (http::request::Parts, ProxyBody),
) -> Result<(Request<ProxyBody>, bool), Response<ProxyBody>> {
    let deadline = Instant::now() + hop.limits.gather;
    match gather(body, MAX_REFERENCE + 5, &hop.limits.budget, deadline).await {
        Ok(Gathered::Whole(collected, charge)) => {
            let data = collected.to_bytes();
            if let Some(message) = single_message(&data) {
                hop.held.keep(connection, message);
            }
            let body = body::holding(body::chunks(vec![data], collected.trailers), charge);
            Ok((Request::from_parts(parts, body), true))
        }
        Ok(Gathered::Stopped(_, partial)) => {
            Ok((Request::from_parts(parts, partial.into_body()), true))
        }
        Err(err) => Err(refused(counters, parts.uri.path(), &err.to_string())),
    }
}

/// The answer to a compressed request whose reference is no longer held:
/// it has the requester's sidecar send the request again without one.
fn reference_missed() -> Response<ProxyBody> {
    let mut response = grpc_status::response(
        grpc_status::UNAVAILABLE,
        "tlcd: the compressed request's reference is no longer held",
    );
    peer::mark_hop(response.headers_mut());
    response
        .headers_mut()
        .insert(peer::HOP_MISS, HeaderValue::from_static("1"));
    response
}

/// A compressed request read whole within the gather bounds and restored
/// (against `reference`), held in the budget until TensorFlow has read it.
async fn restore_compressed(
    hop: &Hop,
    counters: &HopCounters,
    connection: ConnectionId,
    (parts, body): (http::request::Parts, ProxyBody),
    reference: Option<Bytes>,
) -> Result<(Request<ProxyBody>, bool), Response<ProxyBody>> {
    let deadline = Instant::now() + hop.limits.gather;
    let budget = &hop.limits.budget;
    let path = parts.uri.path();
    let (mut collected, mut charge) = match gather(body, MAX_REQUEST, budget, deadline).await {
        Ok(Gathered::Whole(collected, charge)) => (collected, charge),
        Ok(Gathered::Stopped(Stop::Long, _)) => {
            // A sidecar compresses only what it gathered within the same bound.
            let err = format!("more than {MAX_REQUEST} bytes");
            return Err(refused(counters, path, &err));
        }
        Ok(Gathered::Stopped(Stop::Budget, _)) => {
            let why = "the in-flight memory budget is spent";
            return Err(send_again(counters, Refusal::GatherBudget, path, why));
        }
        Ok(Gathered::Stopped(Stop::Late, _)) => {
            let why = format!("not whole within {:?}", hop.limits.gather);
            return Err(send_again(counters, Refusal::GatherTime, path, &why));
        }
        Err(err) => return Err(refused(counters, path, &err.to_string())),
    };
    let restored = hop::restore_body_with(&collected.to_bytes(), MAX_REQUEST, reference.as_deref());
    let trailers = collected.trailers.take();
    drop(collected);
    match restored {
        Ok((data, counted)) => {
            // The restored bytes are held until TensorFlow has read them.
            if charge.try_grow(data.len() as u64).is_err() {
                let why = "the in-flight memory budget is spent";
                return Err(send_again(counters, Refusal::GatherBudget, path, why));
            }
            counters.count_restored(counted);
            if let Some(message) = single_message(&data) {
                hop.held.keep(connection, message);
            }
            let body = body::holding(body::chunks(vec![Bytes::from(data)], trailers), charge);
            Ok((Request::from_parts(parts, body), true))
        }
        Err(err) => Err(refused(counters, path, &err.to_string())),
    }
}

/// The answer to a compressed request this side will not hold (the budget
/// is spent, or it did not arrive in time): TensorFlow's answer to an
/// encoding it does not know, which has the requester's sidecar send the
/// call again uncompressed, before anything reached TensorFlow. Counted
/// and logged (rate-limited).
fn send_again(
    counters: &HopCounters,
    refusal: Refusal,
    path: &str,
    why: &str,
) -> Response<ProxyBody> {
    counters.refused(refusal, path, &why);
    let mut response = grpc_status::response(
        grpc_status::UNIMPLEMENTED,
        &format!("tlcd: hop-compressed request refused ({why}); send it uncompressed"),
    );
    response
        .headers_mut()
        .insert(HOP_AGAIN, HeaderValue::from_static("1"));
    response
}

/// Puts back the full method path of a request that came with a short one
/// ([`tlc_wire::short_path`]). Returns the answer to a short path this
/// build does not know: `UNIMPLEMENTED`, before anything reaches
/// TensorFlow, so that the requester's sidecar sends it again in full.
fn expand_path(parts: &mut http::request::Parts) -> Option<Response<ProxyBody>> {
    let full = match short_path::expand(parts.uri.path()) {
        Ok(None) => return None,
        Ok(Some(full)) => full,
        Err(unknown) => {
            let mut response = grpc_status::response(
                grpc_status::UNIMPLEMENTED,
                &format!("tlcd: {unknown} {}", parts.uri.path()),
            );
            peer::mark_hop(response.headers_mut());
            return Some(response);
        }
    };
    set_path(&mut parts.uri, full).err().map(|err| {
        grpc_status::response(
            grpc_status::INTERNAL,
            &format!("tlcd: cannot restore a short method path: {err}"),
        )
    })
}

/// The answer to a request that cannot be restored, counted and logged.
fn refused(counters: &HopCounters, path: &str, err: &str) -> Response<ProxyBody> {
    counters.failed();
    warn!(%path, error = %err, "cannot restore a peer's compressed request");
    let mut response = grpc_status::response(
        grpc_status::INTERNAL,
        &format!("tlcd: cannot restore the compressed request: {err}"),
    );
    peer::mark_hop(response.headers_mut());
    response
}

/// The holder's side, answering a call marked by a sidecar: marks the
/// answer, and compresses its messages when `compress` allows (the policy,
/// and the sidecar's link decision, which leaves a float tensor sent raw
/// on a fast link as it is) and the answer is TensorFlow's plain gRPC (not
/// an envelope, not already encoded).
pub fn compress_response(
    mut response: Response<ProxyBody>,
    counters: &Arc<HopCounters>,
    compress: bool,
) -> Response<ProxyBody> {
    peer::mark_hop(response.headers_mut());
    peer::mark_short_paths(response.headers_mut());
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
    let body = messages::compress(body, Arc::clone(counters));
    Response::from_parts(parts, body)
}
