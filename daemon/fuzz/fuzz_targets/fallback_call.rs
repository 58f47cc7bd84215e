//! A fallback call (`/tlc.Sidecar/Fallback`) with arbitrary bytes as its
//! `tlc-fallback` token, read by `FallbackCache::serve` on a cache holding
//! one response (with a `ConnectionId`). The input is split at newlines as
//! `wire/fuzz`'s `peer_headers` splits it; the sixth line is the token,
//! and the other headers of the call are the lines before it.
//!
//! Must hold: no panic; a fallback call is answered NOT_FOUND for a token
//! that reads as hex (at most 16 digits) and INTERNAL for any other, hands
//! a kept response only to the connection it was kept for, and only once.

#![no_main]

mod runtime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use tlc_proxy::body;
use tlc_proxy::connection::ConnectionId;
use tlc_sidecar::sidecar::fallback::FallbackCache;
use tlc_wire::peer;

use runtime::runtime;

const NAMES: [&str; 6] = [
    peer::REPLICA,
    peer::CLASS,
    peer::MAX_TENSOR,
    peer::PEER,
    peer::ENVELOPE,
    peer::FALLBACK,
];

const OWNER: ConnectionId = ConnectionId(1);
const OTHER: ConnectionId = ConnectionId(2);

fuzz_target!(|input: &[u8]| {
    let mut headers = HeaderMap::new();
    let mut fallback = None;
    for (name, raw) in NAMES.iter().zip(input.split(|&b| b == b'\n')) {
        if let Ok(value) = HeaderValue::from_bytes(raw) {
            headers.insert(*name, value.clone());
            if *name == peer::FALLBACK {
                fallback = Some(value);
            }
        }
    }
    serve_fallback(&headers, fallback.as_ref(), input);
});

/// A fallback call with `headers` to a cache holding one response for
/// `OWNER`, under a token taken from the input.
fn serve_fallback(headers: &HeaderMap, value: Option<&HeaderValue>, input: &[u8]) {
    let mut token_bytes = [0u8; 8];
    for (i, b) in input.iter().rev().take(8).enumerate() {
        token_bytes[i] = *b;
    }
    let kept_token = u64::from_le_bytes(token_bytes);
    let token = value.and_then(|v| v.to_str().ok()).and_then(hex_token);
    let cache = FallbackCache::new(1 << 10);
    let kept = Bytes::from_static(b"\0\0\0\0\x02\x10\x01");
    cache.keep(kept_token, OWNER, vec![kept.clone()], None);

    let call = |connection: Option<ConnectionId>| {
        let mut request = Request::post(peer::FALLBACK_PATH)
            .body(body::empty())
            .expect("a fallback request");
        *request.headers_mut() = headers.clone();
        if let Some(connection) = connection {
            request.extensions_mut().insert(connection);
        }
        let response = cache.serve(&request);
        let status = response
            .headers()
            .get("grpc-status")
            .map(|s| s.to_str().expect("a status is ASCII").to_owned());
        let body = runtime()
            .block_on(body::collect(response.into_body(), 1 << 20))
            .expect("an answer in memory reads")
            .to_bytes();
        (status, body)
    };
    let not_found = (Some("5".to_owned()), Bytes::new());
    let no_token = (Some("13".to_owned()), Bytes::new());
    let Some(token) = token else {
        for connection in [None, Some(OTHER), Some(OWNER)] {
            assert_eq!(call(connection), no_token, "no token: {value:?}");
        }
        assert_eq!(cache.len_and_bytes().0, 1);
        return;
    };
    assert_eq!(call(None), not_found, "a call without a connection");
    assert_eq!(
        call(Some(OTHER)),
        not_found,
        "another connection's response"
    );
    if token == kept_token {
        assert_eq!(call(Some(OWNER)), (None, kept), "the owner gets it");
        assert_eq!(cache.len_and_bytes().0, 0);
    }
    assert_eq!(call(Some(OWNER)), not_found, "gone, or never kept");
}

/// The token a `tlc-fallback` value names: 1 to 16 hex digits (an
/// optional `+`, as Rust's integer parser takes it).
fn hex_token(text: &str) -> Option<u64> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    if text.len() > 16 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}
