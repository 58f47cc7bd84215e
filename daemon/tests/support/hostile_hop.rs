//! For `hostile_hop.rs`: a peer that stops halfway through its requests,
//! a TensorFlow that stops reading, a holder's sidecar whose answers
//! restore to far more than crossed, and this process's resident memory.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tlc_proxy::body::ProxyBody;
use tokio::net::TcpStream;

use crate::support;

/// The method the hostile calls name (any would do).
pub const RUN_GRAPH: &str = "/tensorflow.WorkerService/RunGraph";

/// Resets the peak resident memory to the current one (Linux `clear_refs` 5).
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// A line of `/proc/self/status`, in bytes.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

pub fn peak_rss() -> u64 {
    status_bytes("VmHWM:")
}

pub fn rss() -> u64 {
    status_bytes("VmRSS:")
}

/// A request body that sends `first` and then never ends: a peer that
/// stops halfway through a call.
pub struct Unfinished(pub Option<Bytes>);

impl http_body::Body for Unfinished {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.take() {
            Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            None => Poll::Pending,
        }
    }
}

/// An HTTP/2 connection to `addr` sending [`Unfinished`] bodies.
pub async fn unfinished_sender(
    addr: SocketAddr,
) -> hyper::client::conn::http2::SendRequest<Unfinished> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(1 << 20)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

pub fn unfinished_request(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    first: Bytes,
) -> Request<Unfinished> {
    let mut builder = Request::post(format!("http://{addr}{RUN_GRAPH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(Unfinished(Some(first))).unwrap()
}

/// The `grpc-status` of an answer's head (a trailers-only answer).
pub fn head_status(response: &Response<Incoming>) -> Option<String> {
    response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// A gRPC body of one message.
pub fn one_message(message: &[u8]) -> Bytes {
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    Bytes::from(body)
}

/// A holder that counts the calls reaching it (at their head) and answers
/// each with a small message once its request has ended.
pub async fn counting_server(arrived: Arc<AtomicUsize>) -> SocketAddr {
    support::serve(Arc::new(move |request: Request<Incoming>| {
        arrived.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let _ = request.into_body().collect().await;
            support::grpc_response(one_message(b"answer"), HeaderMap::new())
        })
    }))
    .await
}

/// A holder's sidecar stand-in that answers every call with `messages`
/// hop-compressed messages, each 1 MiB of zeros (49 bytes on the wire).
pub async fn bomb_holder(messages: usize) -> SocketAddr {
    let mut packed = Vec::new();
    assert!(tlc_wire::hop::compress(&vec![0u8; 1 << 20], &mut packed));
    let mut body = BytesMut::new();
    for _ in 0..messages {
        body.extend_from_slice(&[tlc_wire::hop::COMPRESSED]);
        body.extend_from_slice(&(packed.len() as u32).to_be_bytes());
        body.extend_from_slice(&packed);
    }
    let body = body.freeze();
    eprintln!("bomb: {messages} messages in {} bytes", body.len());
    support::serve(Arc::new(move |request: Request<Incoming>| {
        let body = body.clone();
        Box::pin(async move {
            drop(request);
            let mut response: Response<ProxyBody> = support::grpc_response(body, HeaderMap::new());
            tlc_wire::peer::mark_hop(response.headers_mut());
            response
                .headers_mut()
                .insert("grpc-encoding", "zstd".parse().unwrap());
            response
        })
    }))
    .await
}

/// A stream whose reads stop once `stalled` is set: TensorFlow not
/// reading the answers it asked for.
pub struct StallReads {
    pub inner: TcpStream,
    pub stalled: Arc<AtomicBool>,
}

impl tokio::io::AsyncRead for StallReads {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.stalled.load(Ordering::SeqCst) {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for StallReads {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An HTTP/2 connection to `addr` with 1 GiB windows whose reads stop once
/// it is open: a TensorFlow that asks for answers and never reads them, as
/// both `hostile_hop.rs` and `hostile_peers.rs` need.
pub async fn never_reading_sender(
    addr: SocketAddr,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>> {
    let stalled = Arc::new(AtomicBool::new(false));
    let io = StallReads {
        inner: TcpStream::connect(addr).await.unwrap(),
        stalled: Arc::clone(&stalled),
    };
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(1 << 30)
        .initial_connection_window_size(1 << 30)
        .handshake::<_, http_body_util::Full<Bytes>>(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(connection);
    // From here on the client reads nothing: not even the first answers,
    // which would be the client's memory, not tlcd's.
    stalled.store(true, Ordering::SeqCst);
    sender
}
