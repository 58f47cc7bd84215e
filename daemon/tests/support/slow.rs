//! A client that reads slowly, as TensorFlow does on a busy CPU, and a
//! server whose answers are large: what leaves megabytes of a response in
//! the kernel's buffers while the proxy closes the connection.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tlc_proxy::body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

/// Bytes of one chunk of a large answer.
const CHUNK: usize = 64 << 10;

/// Serves h2c; every call is answered with `size` bytes (a multiple of
/// 64 KiB; byte `i` of chunk `c` is `c % 251`) and `grpc-status: 0`.
pub async fn large_answers(size: usize) -> SocketAddr {
    super::serve(Arc::new(move |request: Request<Incoming>| {
        Box::pin(async move {
            let _ = request.into_body().collect().await;
            let chunks = (0..size / CHUNK)
                .map(|c| Bytes::from(vec![(c % 251) as u8; CHUNK]))
                .collect();
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            let mut response = http::Response::new(body::chunks(chunks, Some(trailers)));
            response
                .headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            response
        })
    }))
    .await
}

/// A client connection whose socket is read at most `per_ms` bytes a
/// millisecond, with a small receive buffer (so what it has not read
/// stays in the sender's kernel buffers) and 1 MiB HTTP/2 windows (so it
/// sends WINDOW_UPDATEs while it reads). `read` counts the body bytes
/// its calls have received.
pub struct SlowClient {
    sender: SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    /// Body bytes received by every call so far.
    pub read: Arc<AtomicU64>,
}

impl SlowClient {
    pub async fn connect(addr: SocketAddr, per_ms: usize) -> SlowClient {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 << 10).unwrap();
        let tcp = socket.connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(1 << 20)
            .handshake(TokioIo::new(SlowReader::new(tcp, per_ms)))
            .await
            .unwrap();
        tokio::spawn(connection);
        SlowClient {
            sender,
            addr,
            read: Arc::default(),
        }
    }

    /// Starts a call; the task returns the body's length once it has
    /// ended with trailers that say OK, or what went wrong.
    pub fn call(&self) -> tokio::task::JoinHandle<Result<usize, String>> {
        let mut sender = self.sender.clone();
        let read = self.read.clone();
        let uri = format!("http://{}/x.Y/Z", self.addr);
        tokio::spawn(async move {
            let request = Request::post(uri)
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(Full::new(Bytes::from_static(b"\0\0\0\0\x01x")))
                .unwrap();
            sender.ready().await.map_err(|e| format!("ready: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("send: {e}"))?;
            let mut body = response.into_body();
            let mut got = 0;
            let mut status = None;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("body after {got} bytes: {}", chain(&e)))?;
                if let Some(data) = frame.data_ref() {
                    got += data.len();
                    read.fetch_add(data.len() as u64, Ordering::SeqCst);
                }
                if let Some(trailers) = frame.trailers_ref() {
                    status = trailers.get("grpc-status").cloned();
                }
            }
            match status {
                Some(status) if status == "0" => Ok(got),
                other => Err(format!("{got} bytes, then grpc-status {other:?}")),
            }
        })
    }

    /// Waits until the calls have received `bytes` in all.
    pub async fn wait_for(&self, bytes: u64) {
        while self.read.load(Ordering::SeqCst) < bytes {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An error and its causes, on one line.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

/// A socket read at most `per_ms` bytes a millisecond.
struct SlowReader {
    inner: TcpStream,
    per_ms: usize,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl SlowReader {
    fn new(inner: TcpStream, per_ms: usize) -> SlowReader {
        SlowReader {
            inner,
            per_ms,
            pause: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }
}

impl AsyncRead for SlowReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.pause.as_mut().poll(cx));
        let room = buf.remaining().min(self.per_ms);
        let mut limited = ReadBuf::new(&mut buf.initialize_unfilled()[..room]);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut limited))?;
        let n = limited.filled().len();
        buf.advance(n);
        let next = tokio::time::Instant::now() + Duration::from_millis(1);
        self.pause.as_mut().reset(next);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SlowReader {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
