//! Recording `RecvTensor` calls to files, to keep real TensorFlow traffic
//! as test fixtures and to debug what crosses the wire.
//!
//! Each call `N` becomes `N.request.grpc` and `N.response.grpc` (the gRPC
//! message bytes exactly as they travelled: 5-byte prefix and protobuf)
//! and `N.meta.txt` (path, headers and trailers).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::HeaderMap;
use tracing::warn;

use http::{Request, Response};

use super::{MAX_REQUEST, MAX_RESPONSE};
use tlc_proxy::body::{self, ProxyBody};
use tlc_proxy::forward::forward;
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;

/// Writes recorded calls into one directory.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    next: AtomicU64,
    limit: u64,
    next_graph: AtomicU64,
}

/// Graph registration messages kept at most.
const MAX_GRAPHS: u64 = 1000;

impl Recorder {
    /// Records up to `limit` calls into `dir` (created if missing).
    pub fn new(dir: &Path, limit: u64) -> std::io::Result<Recorder> {
        std::fs::create_dir_all(dir)?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            next: AtomicU64::new(0),
            limit,
            next_graph: AtomicU64::new(0),
        })
    }

    /// Claims the number of the next call, or `None` once `limit` calls are recorded.
    pub fn claim(&self) -> Option<u64> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (n < self.limit).then_some(n)
    }

    /// Writes one graph registration message (a `RegisterGraphRequest` or
    /// an `EnqueueRequest`, without the gRPC prefix) as
    /// `graphs/NNNNNN.<kind>.pb`; at most a thousand.
    pub fn write_graph(&self, kind: &str, message: &[u8]) {
        let n = self.next_graph.fetch_add(1, Ordering::Relaxed);
        if n >= MAX_GRAPHS {
            return;
        }
        let dir = self.dir.join("graphs");
        let path = dir.join(format!("{n:06}.{kind}.pb"));
        if let Err(err) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, message))
        {
            warn!(path = %path.display(), error = %err, "cannot write recording");
        }
    }

    /// Writes one call. Failures are logged, never passed to the call.
    pub fn write(&self, n: u64, call: &RecordedCall<'_>) {
        let base = self.dir.join(format!("{n:06}"));
        let mut meta = format!("path: {}\n", call.path);
        for (title, headers) in [
            ("request headers", call.request_headers),
            ("response headers", call.response_headers),
            ("response trailers", call.response_trailers),
        ] {
            let _ = writeln!(meta, "[{title}]");
            for (name, value) in headers {
                let _ = writeln!(
                    meta,
                    "{name}: {}",
                    String::from_utf8_lossy(value.as_bytes())
                );
            }
        }
        let files = [
            (base.with_extension("request.grpc"), concat(call.request)),
            (base.with_extension("response.grpc"), concat(call.response)),
            (base.with_extension("meta.txt"), Bytes::from(meta)),
        ];
        for (path, bytes) in files {
            if let Err(err) = std::fs::write(&path, &bytes) {
                warn!(path = %path.display(), error = %err, "cannot write recording");
            }
        }
    }
}

/// What one recorded call consists of.
pub struct RecordedCall<'a> {
    /// The gRPC method path.
    pub path: &'a str,
    /// Request headers.
    pub request_headers: &'a HeaderMap,
    /// Request body chunks.
    pub request: &'a [Bytes],
    /// Response headers.
    pub response_headers: &'a HeaderMap,
    /// Response body chunks.
    pub response: &'a [Bytes],
    /// Response trailers.
    pub response_trailers: &'a HeaderMap,
}

fn concat(chunks: &[Bytes]) -> Bytes {
    chunks
        .iter()
        .flat_map(|c| c.iter().copied())
        .collect::<Vec<u8>>()
        .into()
}

/// Forwards a call with both bodies read whole, and writes them to files.
/// The call itself passes through as it is (no compression).
pub async fn record_call(
    recorder: &Recorder,
    n: u64,
    upstream: &Upstream,
    request: Request<ProxyBody>,
) -> Response<ProxyBody> {
    let (parts, request_body) = request.into_parts();
    let request_body = match body::collect(request_body, MAX_REQUEST).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::INTERNAL,
                &format!("tlcd: reading request: {err}"),
            )
        }
    };
    let request_headers = parts.headers.clone();
    let path = parts.uri.path().to_owned();
    let request = Request::from_parts(
        parts,
        body::chunks(request_body.chunks.clone(), request_body.trailers.clone()),
    );
    let response = forward(upstream, request).await;
    let (parts, response_body) = response.into_parts();
    let response_body = match body::collect(response_body, MAX_RESPONSE).await {
        Ok(collected) => collected,
        Err(err) => {
            return grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading response: {err}"),
            )
        }
    };
    let empty = http::HeaderMap::new();
    recorder.write(
        n,
        &RecordedCall {
            path: &path,
            request_headers: &request_headers,
            request: &request_body.chunks,
            response_headers: &parts.headers,
            response: &response_body.chunks,
            response_trailers: response_body.trailers.as_ref().unwrap_or(&empty),
        },
    );
    Response::from_parts(
        parts,
        body::chunks(response_body.chunks, response_body.trailers),
    )
}
