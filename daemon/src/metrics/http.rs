//! The metrics endpoint: `GET /metrics` on its own port, read-only.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use tlc_proxy::http_server::{self, Handler};
use tlc_sidecar::sidecar::Sidecar;

/// The only path served.
pub const PATH: &str = "/metrics";

/// OpenMetrics 1.0 text, what [`super::render`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const TEXT: &str = "text/plain; charset=utf-8";

/// Answers one request: `GET /metrics` with the exposition; 404 for any
/// other path, 405 for any other method.
pub fn handle<B>(sidecar: &Sidecar, request: &Request<B>) -> Response<Full<Bytes>> {
    if request.uri().path() != PATH {
        return http_server::response(
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"not found: metrics are at /metrics\n"),
        );
    }
    if request.method() != Method::GET {
        let mut response = http_server::response(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            Bytes::from_static(b"method not allowed: use GET\n"),
        );
        response
            .headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("GET"));
        return response;
    }
    match super::render(sidecar) {
        Ok(text) => http_server::response(StatusCode::OK, CONTENT_TYPE, Bytes::from(text)),
        Err(err) => {
            warn!(%err, "cannot encode the metrics");
            internal_error(b"cannot encode the metrics\n")
        }
    }
}

/// Serves the metrics of `sidecar` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, sidecar: Arc<Sidecar>, shutdown: CancellationToken) {
    http_server::serve(listener, handler(sidecar), shutdown).await
}

/// [`handle`] as an [`http_server`] handler. A scrape locks each context
/// briefly and may wait for one being encoded, so it runs on the blocking
/// pool rather than holding up a runtime thread.
pub fn handler(sidecar: Arc<Sidecar>) -> Handler {
    Arc::new(move |request: Request<Incoming>| {
        let sidecar = Arc::clone(&sidecar);
        Box::pin(async move {
            let (parts, _body) = request.into_parts();
            let request = Request::from_parts(parts, ());
            match tokio::task::spawn_blocking(move || handle(&sidecar, &request)).await {
                Ok(response) => response,
                Err(err) => {
                    warn!(%err, "metrics scrape failed");
                    internal_error(b"scrape failed\n")
                }
            }
        })
    })
}

/// A 500 saying `why` in plain text: the scrape failed on this side.
fn internal_error(why: &'static [u8]) -> Response<Full<Bytes>> {
    http_server::response(
        StatusCode::INTERNAL_SERVER_ERROR,
        TEXT,
        Bytes::from_static(why),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn serves_get_metrics_only() {
        let sidecar = Sidecar::default();
        let ok = handle(&sidecar, &request(Method::GET, "/metrics?x=1"));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[http::header::CONTENT_TYPE], CONTENT_TYPE);
        let missing = handle(&sidecar, &request(Method::GET, "/"));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let post = handle(&sidecar, &request(Method::POST, "/metrics"));
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[http::header::ALLOW], "GET");
    }
}
