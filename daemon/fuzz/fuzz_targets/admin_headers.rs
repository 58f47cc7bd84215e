//! Arbitrary bytes as the headers an admin API request shows its guard
//! (`admin/guard.rs`: `Host`, `Origin`, `Authorization`, `Content-Type`),
//! and as the contents of an admin token file (`admin::token::parse`).
//!
//! Input: a method byte (GET, POST, PATCH, PUT, DELETE, OPTIONS), then one
//! value per line in that header order; an empty line leaves the header
//! out, lines 5 to 8 add a second value to the same four headers, and a
//! value HTTP cannot carry is left out. The guard answers to the listen
//! address 10.1.2.3, `tlc-admin.ml.svc` and the loopback names.
//!
//! Must hold: no panic; a request is let through only with exactly one
//! `Authorization: Bearer TOKEN` naming the token in force, one `Host` that
//! names this API, no `Origin` or one `http`/`https` origin naming it, and,
//! for a method that changes something, one `Content-Type` of
//! `application/json`; a refusal is 400, 401 (with its `WWW-Authenticate`
//! challenge), 403 or 415, and its message never repeats the token sent
//! in `Authorization`. A token file's token is its bytes without the white
//! space around them: at least 16 printable ASCII bytes.

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use tlc_daemon::admin::guard::Guard;
use tlc_daemon::admin::token::{self, AdminToken, MIN_TOKEN_BYTES};
use tlc_daemon::config::admin::normalise_host;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const ALLOWED: &str = "tlc-admin.ml.svc";

const NAMES: [HeaderName; 4] = [
    header::HOST,
    header::ORIGIN,
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
];

const METHODS: [Method; 6] = [
    Method::GET,
    Method::POST,
    Method::PATCH,
    Method::PUT,
    Method::DELETE,
    Method::OPTIONS,
];

fn guard() -> &'static Guard {
    static GUARD: OnceLock<Guard> = OnceLock::new();
    GUARD.get_or_init(|| {
        let token = AdminToken::generated(Path::new("/nonexistent/token"), TOKEN.into());
        let listen = "10.1.2.3:17000".parse().expect("an address");
        Guard::new(token, listen, &[ALLOWED.to_string()])
    })
}

fuzz_target!(|input: &[u8]| {
    check_token_file(input);
    let Some((&method, rest)) = input.split_first() else {
        return;
    };
    let method = METHODS[usize::from(method) % METHODS.len()].clone();
    let mut request = Request::builder()
        .method(method.clone())
        .uri("/v1/policy")
        .body(())
        .expect("a request");
    for (i, line) in rest.split(|&b| b == b'\n').take(8).enumerate() {
        if line.is_empty() {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(line) {
            request.headers_mut().append(&NAMES[i % 4], value);
        }
    }
    let headers = request.headers();
    let one = |name: &HeaderName| -> Option<&str> {
        let mut values = headers.get_all(name).iter();
        let first = values.next()?;
        if values.next().is_some() {
            return None;
        }
        first.to_str().ok()
    };

    match guard().check(&request) {
        Ok(()) => {
            let host = one(&header::HOST).expect("one ASCII Host");
            assert!(names_this_api(host), "Host {host:?} let through");
            if headers.contains_key(header::ORIGIN) {
                let origin = one(&header::ORIGIN).expect("one ASCII Origin");
                let (scheme, authority) = origin.split_once("://").expect("an origin");
                assert!(
                    scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
                );
                assert!(names_this_api(authority), "Origin {origin:?} let through");
            }
            let authorization = one(&header::AUTHORIZATION).expect("one Authorization");
            let (scheme, presented) = authorization.split_once(' ').expect("scheme and token");
            assert!(scheme.eq_ignore_ascii_case("bearer"));
            assert_eq!(presented.trim(), TOKEN);
            if matches!(
                method,
                Method::POST | Method::PUT | Method::PATCH | Method::DELETE
            ) {
                let media = one(&header::CONTENT_TYPE).expect("one Content-Type");
                let media = media.split(';').next().unwrap_or("").trim();
                assert!(media.eq_ignore_ascii_case("application/json"));
            }
        }
        Err(refusal) => {
            assert!(
                [
                    StatusCode::BAD_REQUEST,
                    StatusCode::UNAUTHORIZED,
                    StatusCode::FORBIDDEN,
                    StatusCode::UNSUPPORTED_MEDIA_TYPE
                ]
                .contains(&refusal.status),
                "{refusal:?}"
            );
            assert_eq!(
                refusal.challenge.is_some(),
                refusal.status == StatusCode::UNAUTHORIZED
            );
            let elsewhere = [header::HOST, header::ORIGIN, header::CONTENT_TYPE]
                .iter()
                .flat_map(|name| headers.get_all(name))
                .any(|v| contains(v.as_bytes(), TOKEN.as_bytes()));
            if !elsewhere {
                assert!(
                    !refusal.message.contains(TOKEN),
                    "the refusal repeats the token: {}",
                    refusal.message
                );
            }
        }
    }
});

/// Whether `authority` (`host[:port]`) names a host the guard answers to.
fn names_this_api(authority: &str) -> bool {
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    normalise_host(host).is_some_and(|h| {
        ["localhost", "127.0.0.1", "[::1]", "10.1.2.3", ALLOWED].contains(&h.as_str())
    })
}

/// A token file holding `bytes`.
fn check_token_file(bytes: &[u8]) {
    let Ok(token) = token::parse(Path::new("token"), bytes) else {
        return;
    };
    assert!(token.len() >= MIN_TOKEN_BYTES);
    assert!(token.iter().all(u8::is_ascii_graphic));
    assert_eq!(&token[..], bytes.trim_ascii());
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
