//! What an admin request must show before it is routed. In order:
//!
//! 1. `Host` names this API: `localhost`, `127.0.0.1`, `[::1]`, the listen
//!    address or one of `admin.allowed_hosts` (any port: `kubectl
//!    port-forward` changes it). Else `403`: a browser page whose own name
//!    resolves to 127.0.0.1 (DNS rebinding) sends its own name.
//! 2. No `Origin`, or one naming this API (an allowed host, the port of
//!    `Host`). Else `403`: a browser sends `Origin` with every cross-site
//!    request, and no web page has business here.
//! 3. `Authorization: Bearer TOKEN` with the token in force ([`AdminToken`]).
//!    Else `401` with `WWW-Authenticate: Bearer`.
//! 4. A request that changes something (`POST`, `PUT`, `PATCH`, `DELETE`)
//!    says `Content-Type: application/json`. Else `415`: a browser can send
//!    `text/plain` or a form anywhere without asking first; JSON it must
//!    ask for (a CORS preflight, which this API never grants).
//!
//! The Kubernetes probes (`/healthz`, `/readyz`) are answered before the
//! guard: kubelet sends no token and names the pod's IP as `Host`, and the
//! probes only say whether tlcd is up.

use std::net::SocketAddr;

use http::{header, HeaderMap, Method, Request, StatusCode};

use super::token::AdminToken;
use crate::config::admin::normalise_host;

/// Why a request was turned away: its status and a message that says what
/// to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 400, 401, 403 or 415.
    pub status: StatusCode,
    /// One line for the `error` field.
    pub message: String,
    /// `WWW-Authenticate` value, for a 401.
    pub challenge: Option<&'static str>,
}

impl Refusal {
    fn new(status: StatusCode, message: String) -> Refusal {
        Refusal {
            status,
            message,
            challenge: None,
        }
    }
}

/// The checks, with the names and the token they check against.
#[derive(Debug)]
pub struct Guard {
    token: AdminToken,
    hosts: Vec<String>,
}

impl Guard {
    /// A guard for the admin API listening on `listen`, answering to
    /// `allowed_hosts` besides the loopback names, with `token`.
    pub fn new(token: AdminToken, listen: SocketAddr, allowed_hosts: &[String]) -> Guard {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| h.to_string())
            .collect();
        hosts.extend(normalise_host(&listen.ip().to_string()));
        hosts.extend(allowed_hosts.iter().filter_map(|h| normalise_host(h)));
        Guard { token, hosts }
    }

    /// The token this guard asks for.
    pub fn token(&self) -> &AdminToken {
        &self.token
    }

    /// `Ok` if the request may be routed, else why not.
    pub fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        let headers = request.headers();
        let port = self.check_host(headers)?;
        self.check_origin(headers, port)?;
        self.check_token(headers)?;
        check_content_type(request.method(), headers)
    }

    /// The port `Host` names (80 when none).
    fn check_host(&self, headers: &HeaderMap) -> Result<u16, Refusal> {
        let Some(value) = single(headers, header::HOST)? else {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "a Host header is required".into(),
            ));
        };
        match authority(value) {
            Some((host, port)) if self.hosts.contains(&host) => Ok(port.unwrap_or(80)),
            _ => Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "Host {value:?} is not this admin API's: use localhost or the listen address, \
                     or add the name to admin.allowed_hosts"
                ),
            )),
        }
    }

    fn check_origin(&self, headers: &HeaderMap, host_port: u16) -> Result<(), Refusal> {
        let Some(origin) = single(headers, header::ORIGIN)? else {
            return Ok(());
        };
        let same = origin.split_once("://").and_then(|(scheme, rest)| {
            let default_port = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                _ => return None,
            };
            let (host, port) = authority(rest)?;
            Some(self.hosts.contains(&host) && port.unwrap_or(default_port) == host_port)
        });
        if same == Some(true) {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "requests from web pages are refused (Origin {origin:?}); \
                 use tlcctl or an HTTP client without an Origin header"
            ),
        ))
    }

    fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let where_ = if self.token.is_configured() {
            format!(
                "the token in {} (admin.token_file)",
                self.token.path().display()
            )
        } else {
            format!(
                "the token tlcd wrote to {} (tlcctl on this host reads it itself)",
                self.token.path().display()
            )
        };
        let presented = single(headers, header::AUTHORIZATION)?;
        let Some(presented) = presented else {
            return Err(Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "this admin API needs a token: send 'Authorization: Bearer TOKEN' with {where_}, \
                     or run tlcctl --token-file PATH"
                ),
                challenge: Some("Bearer realm=\"tlcd admin\""),
            });
        };
        let token = presented
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        match token {
            Some(token) if self.token.verify(token.as_bytes()) => Ok(()),
            _ => Err(Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "the admin token sent is not the one in force (it changes when tlcd restarts \
                     or its token file is rotated): send 'Authorization: Bearer TOKEN' with {where_}"
                ),
                challenge: Some("Bearer realm=\"tlcd admin\", error=\"invalid_token\""),
            }),
        }
    }
}

/// A body that changes something must be declared JSON.
fn check_content_type(method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    if !matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return Ok(());
    }
    let declared = single(headers, header::CONTENT_TYPE)?;
    let media_type = declared.and_then(|v| v.split(';').next()).map(str::trim);
    match media_type {
        Some(m) if m.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "{method} needs Content-Type: application/json (got {})",
                declared.map_or_else(|| "none".to_string(), |v| format!("{v:?}"))
            ),
        )),
    }
}

/// The value of a header that may appear at most once, as text.
fn single(headers: &HeaderMap, name: header::HeaderName) -> Result<Option<&str>, Refusal> {
    let mut values = headers.get_all(&name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let refused =
        |what: &str| Refusal::new(StatusCode::BAD_REQUEST, format!("the {name} header {what}"));
    if values.next().is_some() {
        return Err(refused("is repeated"));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| refused("is not ASCII"))
}

/// `host[:port]` or `[v6][:port]`, the host normalised; `None` if it is
/// not one.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if text.starts_with('[') {
        let end = text.find(']')?;
        let rest = &text[end + 1..];
        let port = match rest {
            "" => None,
            _ => Some(rest.strip_prefix(':')?),
        };
        (&text[..=end], port)
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((normalise_host(host)?, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(allowed: &[&str]) -> (Guard, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "the-right-token-0123\n").unwrap();
        let token = AdminToken::from_file(&path).unwrap();
        let allowed: Vec<String> = allowed.iter().map(|h| h.to_string()).collect();
        let listen = "10.1.2.3:17000".parse().unwrap();
        (Guard::new(token, listen, &allowed), dir)
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri("/v1/policy");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    const AUTH: (&str, &str) = ("authorization", "Bearer the-right-token-0123");
    const JSON: (&str, &str) = ("content-type", "application/json; charset=utf-8");

    fn status(guard: &Guard, method: &str, headers: &[(&str, &str)]) -> u16 {
        match guard.check(&request(method, headers)) {
            Ok(()) => 200,
            Err(refusal) => refusal.status.as_u16(),
        }
    }

    #[test]
    fn hosts() {
        let (g, _dir) = guard(&["tlc-admin.ml.svc"]);
        for host in [
            "localhost",
            "localhost:17000",
            "LOCALHOST:15100",
            "127.0.0.1:17000",
            "[::1]:17000",
            "10.1.2.3:17000",
            "tlc-admin.ml.svc:17000",
        ] {
            assert_eq!(status(&g, "GET", &[("host", host), AUTH]), 200, "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:17000",
            "127.0.0.2:17000",
            "localhost.evil.example",
            "localhost:http",
            "[::1]x",
        ] {
            assert_eq!(status(&g, "GET", &[("host", host), AUTH]), 403, "{host}");
        }
        assert_eq!(status(&g, "GET", &[AUTH]), 400);
    }

    #[test]
    fn origins() {
        let (g, _dir) = guard(&[]);
        let host = ("host", "127.0.0.1:17000");
        assert_eq!(
            status(
                &g,
                "GET",
                &[host, AUTH, ("origin", "http://127.0.0.1:17000")]
            ),
            200
        );
        for origin in [
            "http://evil.example",
            "http://localhost:8888",
            "null",
            "file://",
            "http://127.0.0.1",
        ] {
            assert_eq!(
                status(&g, "GET", &[host, AUTH, ("origin", origin)]),
                403,
                "{origin}"
            );
        }
    }

    #[test]
    fn tokens() {
        let (g, _dir) = guard(&[]);
        let host = ("host", "localhost:17000");
        let missing = g.check(&request("GET", &[host])).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(missing.message.contains("admin.token_file"), "{missing:?}");
        assert!(missing.challenge.is_some_and(|c| c.starts_with("Bearer")));
        for wrong in [
            "Bearer the-wrong-token-0123",
            "Basic the-right-token-0123",
            "the-right-token-0123",
            "Bearer",
        ] {
            let refusal = g
                .check(&request("GET", &[host, ("authorization", wrong)]))
                .unwrap_err();
            assert_eq!(refusal.status, StatusCode::UNAUTHORIZED, "{wrong}");
            assert!(refusal.message.contains("not the one in force"), "{wrong}");
        }
        assert_eq!(
            status(
                &g,
                "GET",
                &[host, ("authorization", "bearer  the-right-token-0123")]
            ),
            200
        );
        assert_eq!(status(&g, "GET", &[host, AUTH, AUTH]), 400);
    }

    #[test]
    fn changes_must_be_json() {
        let (g, _dir) = guard(&[]);
        let host = ("host", "localhost:17000");
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(status(&g, method, &[host, AUTH, JSON]), 200, "{method}");
            assert_eq!(status(&g, method, &[host, AUTH]), 415, "{method}");
            assert_eq!(
                status(&g, method, &[host, AUTH, ("content-type", "text/plain")]),
                415,
                "{method}"
            );
        }
        assert_eq!(
            status(
                &g,
                "POST",
                &[
                    host,
                    AUTH,
                    ("content-type", "application/x-www-form-urlencoded")
                ]
            ),
            415
        );
        assert_eq!(status(&g, "GET", &[host, AUTH]), 200);
        // The token is checked first: no hint about the body to a stranger.
        assert_eq!(
            status(&g, "POST", &[host, ("content-type", "text/plain")]),
            401
        );
    }
}
