//! A small HTTP/1.1 server for the sidecar's own endpoints (the admin API
//! and the metrics). These answers are small and whole, so handlers
//! return a complete body; the proxy's streaming machinery is not needed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Answers one request.
pub type Handler =
    Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, Response<Full<Bytes>>> + Send + Sync>;

/// How long a client may take to send its request head; an idle or slow
/// client must not hold a connection of an operator endpoint forever.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP/1.1 on `listener` with `handler` until `shutdown`, then
/// lets connections in progress finish their current request.
pub async fn serve(listener: TcpListener, handler: Handler, shutdown: CancellationToken) {
    let connections = tokio_util::task::TaskTracker::new();
    while let Some((stream, _)) = crate::listener::accept(&listener, &shutdown).await {
        let handler = Arc::clone(&handler);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let handler = Arc::clone(&handler);
                async move { Ok::<_, Infallible>(handler(request).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        debug!(%err, "admin connection ended");
                    }
                }
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// A response with `status`, `content_type` and `body`.
pub fn response(
    status: http::StatusCode,
    content_type: &str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn answers_and_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let handler: Handler = Arc::new(|request: Request<Incoming>| {
            let path = request.uri().path().to_owned();
            Box::pin(async move { response(http::StatusCode::OK, "text/plain", Bytes::from(path)) })
        });
        let server = tokio::spawn(serve(listener, handler, shutdown.clone()));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("/hello"), "{answer}");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
