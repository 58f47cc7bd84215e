//! The admin API (`daemon/ADMIN-API.md`): JSON over HTTP/1.1 on the pod's
//! loopback, for operators and `tlcctl`. Every request but the probes
//! passes the [`guard`] first (host, origin, token, content type). Reads go
//! to the sidecar and the running configuration; every change goes through
//! [`Control`], which validates it whole before anything moves. The paths
//! and bodies are those of `tlc_admin_api`, which `tlcctl` reads too.

pub mod default_token;
pub mod guard;
pub mod token;
mod views;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tlc_admin_api::{
    paths, ConfigPatch, ErrorBody, LogLevel, PolicyChanged, PolicyRequest, Ready, SetLogLevel,
    Status,
};
use tracing::debug;

use crate::control::policy_change::PolicyChange;
use crate::control::{ApiChange, Control, ControlError};
use guard::{Guard, Refusal};
use tlc_proxy::http_server::{self, Handler};
use tlc_proxy::Listener;

/// Largest request body accepted.
const MAX_BODY: usize = 1 << 20;

/// How long a client may take to send a request body, once its head is
/// in: a client trickling a body must not hold the connection (and a
/// change half-sent) forever. Admin bodies are a few hundred bytes.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the sidecar serves traffic: set once its listeners are bound,
/// cleared when it starts draining.
#[derive(Debug, Default)]
pub struct Readiness {
    listening: AtomicBool,
    draining: AtomicBool,
}

impl Readiness {
    /// Every listener is bound.
    pub fn set_listening(&self) {
        self.listening.store(true, Ordering::SeqCst);
    }

    /// Shutdown has begun.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Why the sidecar is not ready; empty when it is.
    pub fn reasons(&self) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        if !self.listening.load(Ordering::SeqCst) {
            reasons.push("listeners not bound yet");
        }
        if self.draining.load(Ordering::SeqCst) {
            reasons.push("draining for shutdown");
        }
        reasons
    }
}

/// What the admin API answers from.
pub struct Admin {
    control: Arc<Control>,
    readiness: Arc<Readiness>,
    listeners: Vec<Listener>,
    guard: Guard,
    started: Instant,
}

impl Admin {
    /// An admin API over `control`, for a sidecar with `listeners`, that
    /// lets through what `guard` lets through.
    pub fn new(
        control: Arc<Control>,
        readiness: Arc<Readiness>,
        listeners: Vec<Listener>,
        guard: Guard,
    ) -> Admin {
        Admin {
            control,
            readiness,
            listeners,
            guard,
            started: Instant::now(),
        }
    }

    /// The HTTP handler, for [`http_server::serve`].
    pub fn handler(self: Arc<Self>) -> Handler {
        Arc::new(move |request| {
            let admin = Arc::clone(&self);
            Box::pin(async move { admin.answer(request).await })
        })
    }

    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        if method == Method::GET {
            if let Some(response) = probe(&self.readiness, &path) {
                return response;
            }
        }
        if let Err(refusal) = self.guard.check(&request) {
            debug!(%method, %path, status = refusal.status.as_u16(), "admin request refused");
            return refused_by_guard(&refusal);
        }
        let result = match (method.clone(), path.as_str()) {
            (Method::GET, paths::STATUS) => answer(&self.status()),
            (Method::GET, paths::CONFIG) => config(&self.control.current()),
            (Method::PATCH, paths::CONFIG) => match body::<ConfigPatch>(request).await {
                Ok(patch) => {
                    let changes = patch
                        .into_iter()
                        .map(|(key, value)| (key, patched(value)))
                        .collect();
                    self.control
                        .change(&changes)
                        .map_err(refused)
                        .and_then(|resolved| config(&resolved))
                }
                Err(err) => Err(err),
            },
            (Method::POST, paths::POLICY) => match body::<PolicyRequest>(request).await {
                Ok(request) => self
                    .control
                    .change_policy(&PolicyChange::from(request))
                    .map_err(refused)
                    .and_then(|(changed, _)| {
                        answer(&PolicyChanged {
                            changed,
                            policy: views::policy(&self.control.sidecar().policy()),
                        })
                    }),
                Err(err) => Err(err),
            },
            (Method::POST, paths::RELOAD) => self
                .control
                .reload()
                .map_err(refused)
                .and_then(|resolved| config(&resolved)),
            (Method::GET, paths::TENSORS) => views::tensors(self.control.sidecar(), &query)
                .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
                .and_then(|tensors| answer(&tensors)),
            (Method::GET, paths::LOG_LEVEL) => answer(&LogLevel {
                filter: self.control.log().filter(),
            }),
            (Method::PUT, paths::LOG_LEVEL) => match body::<SetLogLevel>(request).await {
                Ok(level) => {
                    let changes = BTreeMap::from([(
                        "log.level".to_string(),
                        ApiChange::Set(Value::String(level.filter)),
                    )]);
                    self.control
                        .change(&changes)
                        .map_err(refused)
                        .and_then(|_| {
                            answer(&LogLevel {
                                filter: self.control.log().filter(),
                            })
                        })
                }
                Err(err) => Err(err),
            },
            (_, endpoint) if paths::ENDPOINTS.contains(&endpoint) => Err((
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {path}"),
            )),
            _ => Err((
                StatusCode::NOT_FOUND,
                format!("no such endpoint: {path} (see daemon/ADMIN-API.md)"),
            )),
        };
        match result {
            Ok(value) => reply(StatusCode::OK, &value),
            Err((status, message)) => {
                let mut response = reply(status, &ErrorBody::new(message));
                if status == StatusCode::REQUEST_TIMEOUT {
                    // The rest of the body may still come: not on this connection.
                    response.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                }
                response
            }
        }
    }

    fn status(&self) -> Status {
        let resolved = self.control.current();
        let sidecar = self.control.sidecar();
        Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            ready: self.readiness.reasons().is_empty(),
            config_file: self.control.file().map(|p| p.display().to_string()),
            listeners: self.listeners.iter().map(views::listener).collect(),
            policy: views::policy(&sidecar.policy()),
            totals: views::totals(sidecar),
            training: views::training(sidecar),
            contexts: views::contexts(sidecar),
            log_filter: self.control.log().filter(),
            log_format: views::log_format(resolved.config.log.format),
            reloads: self.control.reload_stats(),
            links: views::links(sidecar),
        }
    }
}

/// The answer to a Kubernetes probe (`GET /healthz`: the process serves;
/// `GET /readyz`: listeners bound and not draining), or `None` for other paths.
pub fn probe(readiness: &Readiness, path: &str) -> Option<Response<Full<Bytes>>> {
    match path {
        "/healthz" => Some(http_server::response(
            StatusCode::OK,
            "text/plain",
            Bytes::from_static(b"ok\n"),
        )),
        "/readyz" => {
            let ready =
                Ready::from_reasons(readiness.reasons().into_iter().map(String::from).collect());
            let status = if ready.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            Some(reply(status, &ready))
        }
        _ => None,
    }
}

/// `inner` (the metrics endpoint) with the probes in front: kubelet probes
/// reach the pod's address, not its loopback, so they are served on the
/// read-only port too.
pub fn with_probes(readiness: Arc<Readiness>, inner: Handler) -> Handler {
    Arc::new(move |request| {
        if request.method() == Method::GET {
            if let Some(response) = probe(&readiness, request.uri().path()) {
                return Box::pin(async move { response });
            }
        }
        inner(request)
    })
}

type Failure = (StatusCode, String);

/// The change a `PATCH /v1/config` value asks for: `null` removes the key
/// from the API layer.
fn patched(value: Value) -> ApiChange {
    if value.is_null() {
        ApiChange::Remove
    } else {
        ApiChange::Set(value)
    }
}

fn refused(err: ControlError) -> Failure {
    (StatusCode::BAD_REQUEST, err.to_string())
}

/// `body` as the JSON of an answer; `500` if it cannot be (tlcd's fault).
fn answer<T: Serialize>(body: &T) -> Result<Value, Failure> {
    serde_json::to_value(body).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the answer: {e}"),
        )
    })
}

/// The `/v1/config` answer for `resolved`.
fn config(resolved: &crate::config::layers::Resolved) -> Result<Value, Failure> {
    views::config(resolved)
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write the configuration: {e}"),
            )
        })
        .and_then(|view| answer(&view))
}

/// The answer to a request the guard turned away.
fn refused_by_guard(refusal: &Refusal) -> Response<Full<Bytes>> {
    let mut response = reply(refusal.status, &ErrorBody::new(refusal.message.clone()));
    if let Some(challenge) = refusal.challenge {
        response.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static(challenge),
        );
    }
    response
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`].
async fn body<T: DeserializeOwned>(request: Request<Incoming>) -> Result<T, Failure> {
    let collected = tokio::time::timeout(
        BODY_TIMEOUT,
        Limited::new(request.into_body(), MAX_BODY).collect(),
    )
    .await
    .map_err(|_| {
        (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {}s",
                BODY_TIMEOUT.as_secs()
            ),
        )
    })?;
    let bytes = collected
        .map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("request body: {e}")))
}

/// An answer with `body` as indented JSON. Written through a [`Value`], as
/// tlcd has always written them: the keys of every object in sorted order.
fn reply<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let mut text = serde_json::to_value(body)
        .and_then(|value| serde_json::to_vec_pretty(&value))
        .unwrap_or_else(|_| b"{}".to_vec());
    text.push(b'\n');
    http_server::response(status, "application/json", Bytes::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn probes_answer_in_front_of_the_metrics() {
        let readiness = Arc::new(Readiness::default());
        let inner: Handler = Arc::new(|_request| {
            Box::pin(async {
                http_server::response(StatusCode::OK, "text/plain", Bytes::from_static(b"metrics"))
            })
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(http_server::serve(
            listener,
            with_probes(readiness.clone(), inner),
            shutdown.clone(),
        ));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let not_yet = get(addr, "/readyz").await;
        assert!(not_yet.starts_with("HTTP/1.1 503"), "{not_yet}");
        assert!(not_yet.contains("listeners not bound yet"), "{not_yet}");
        readiness.set_listening();
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/metrics").await.ends_with("metrics"));
        readiness.set_draining();
        assert!(get(addr, "/readyz").await.contains("draining for shutdown"));
        shutdown.cancel();
    }
}
