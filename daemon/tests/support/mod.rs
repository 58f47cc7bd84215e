//! Test peers: a small h2c server that answers like a gRPC service, and a
//! client that calls it, both on hyper.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tlc_proxy::body::{self, ProxyBody};
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;
use tokio::net::{TcpListener, TcpStream};

/// What a test server does with one call.
pub type Handler = std::sync::Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send>>
        + Send
        + Sync,
>;

/// Serves h2c on a free loopback port, every call through `handler`, with
/// TCP_NODELAY as TensorFlow's gRPC sets it; returns the address.
pub async fn serve(handler: Handler) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let response = handler(request);
                    async move { Ok::<_, Infallible>(response.await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A gRPC response: `body`, then `trailers` (`grpc-status: 0` added).
pub fn grpc_response(body: Bytes, mut trailers: HeaderMap) -> Response<ProxyBody> {
    trailers.insert("grpc-status", "0".parse().unwrap());
    let mut response = Response::new(body::chunks(vec![body], Some(trailers)));
    response
        .headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    response
}

/// A server that echoes the body back, with the path and length in trailers.
pub async fn start_echo_server() -> SocketAddr {
    serve(std::sync::Arc::new(|request: Request<Incoming>| {
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            let echo_header = request.headers().get("x-echo").cloned();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut trailers = HeaderMap::new();
            trailers.insert("x-path", path.parse().unwrap());
            trailers.insert("x-len", body.len().to_string().parse().unwrap());
            let mut response = grpc_response(body, trailers);
            if let Some(value) = echo_header {
                response.headers_mut().insert("x-echo", value);
            }
            response
        })
    }))
    .await
}

/// Opens a prior-knowledge HTTP/2 connection to `addr`, its errors as text
/// ("connect: …", "handshake: …"): for clients that report failures rather
/// than unwrap them.
pub async fn try_connect(
    addr: SocketAddr,
) -> Result<hyper::client::conn::http2::SendRequest<Full<Bytes>>, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The whole body of `response`, an error as text ("body: …"): the end of
/// every call made with [`try_connect`].
pub async fn try_body(response: Response<Incoming>) -> Result<Bytes, String> {
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok(body.to_bytes())
}

/// A client connection with prior-knowledge HTTP/2.
pub struct Client {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
}

/// A finished call: status, headers, body and trailers.
pub struct Reply {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: HeaderMap,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(32 << 20)
            .handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(connection);
        Client { sender, addr }
    }

    pub async fn call(&self, path: &str, headers: &[(&str, &str)], body: Bytes) -> Reply {
        let mut builder = Request::post(format!("http://{}{}", self.addr, path))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let request = builder.body(Full::new(body)).unwrap();
        let mut sender = self.sender.clone();
        let response = sender.send_request(request).await.unwrap();
        let headers = response.headers().clone();
        let mut body = response.into_body();
        let mut data = BytesMut::new();
        let mut trailers = HeaderMap::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            match frame.into_data() {
                Ok(chunk) => data.extend_from_slice(&chunk),
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        trailers = t;
                    }
                }
            }
        }
        Reply {
            headers,
            body: data.freeze(),
            trailers,
        }
    }
}
pub mod certs;
pub mod metrics;
pub mod process;

/// Policy settings that compress wherever the policy says, whatever the
/// link (`[policy.link] mode = "always"`): these tests check what
/// compression does, and their links are loopback, where `auto` would
/// rightly send tensors raw once it has timed them; so they stay right
/// whichever mode is the default. The link decision itself is tested in
/// `link.rs`.
pub fn compressing_settings() -> tlc_sidecar::policy::PolicySettings {
    tlc_sidecar::policy::PolicySettings {
        link: tlc_sidecar::policy::LinkSettings {
            mode: tlc_sidecar::policy::LinkMode::Always,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The default policy, compressing whatever the link (see
/// [`compressing_settings`]).
pub fn compressing_policy() -> tlc_sidecar::policy::Policy {
    tlc_sidecar::policy::Policy::new(&compressing_settings()).unwrap()
}

/// A sidecar with the default bounds and [`compressing_policy`].
pub fn compressing_sidecar() -> tlc_sidecar::Sidecar {
    tlc_sidecar::Sidecar::new(compressing_policy(), Default::default(), None)
}

/// A shared sidecar with [`compressing_policy`] and the bounds in
/// `options`: for tests that tighten a budget or a limit.
pub fn compressing_sidecar_with(
    options: tlc_sidecar::sidecar::Options,
) -> std::sync::Arc<tlc_sidecar::Sidecar> {
    std::sync::Arc::new(tlc_sidecar::Sidecar::new(
        compressing_policy(),
        options,
        None,
    ))
}

/// The environment that makes a tlcd process compress whatever the link.
pub const COMPRESSING_ENV: (&str, &str) = ("TLC_POLICY__LINK__MODE", "always");
pub mod slow;
pub mod tf;

/// A proxy with one route from a free loopback port to `upstream`.
pub async fn proxy(
    role: tlc_core::Role,
    upstream: SocketAddr,
    sidecar: std::sync::Arc<tlc_sidecar::Sidecar>,
) -> tlc_proxy::Proxy<tlc_sidecar::Sidecar> {
    proxy_at(role, "127.0.0.1:0".parse().unwrap(), upstream, sidecar).await
}

/// A proxy with one route from `listen` to `upstream`.
pub async fn proxy_at(
    role: tlc_core::Role,
    listen: SocketAddr,
    upstream: SocketAddr,
    sidecar: std::sync::Arc<tlc_sidecar::Sidecar>,
) -> tlc_proxy::Proxy<tlc_sidecar::Sidecar> {
    start_route(listen, role, upstream.into(), sidecar, |_| {}).await
}

/// A proxy with one route from a free loopback port to `upstream`, its
/// config changed by `configure` (limits, TLS, drain time): so that tests
/// that need one setting do not each spell out the whole config.
pub async fn proxy_configured(
    role: tlc_core::Role,
    upstream: impl Into<tlc_proxy::intercept::Destination>,
    sidecar: std::sync::Arc<tlc_sidecar::Sidecar>,
    configure: impl FnOnce(&mut tlc_daemon::config::Config),
) -> tlc_proxy::Proxy<tlc_sidecar::Sidecar> {
    let listen = "127.0.0.1:0".parse().unwrap();
    start_route(listen, role, upstream.into(), sidecar, configure).await
}

/// Starts a proxy whose config has the one route given and what
/// `configure` sets: the start [`proxy_at`] and [`proxy_configured`] share.
async fn start_route(
    listen: SocketAddr,
    role: tlc_core::Role,
    upstream: tlc_proxy::intercept::Destination,
    sidecar: std::sync::Arc<tlc_sidecar::Sidecar>,
    configure: impl FnOnce(&mut tlc_daemon::config::Config),
) -> tlc_proxy::Proxy<tlc_sidecar::Sidecar> {
    let mut config = tlc_daemon::config::Config {
        routes: vec![tlc_daemon::config::Route {
            listen,
            upstream,
            role,
        }],
        ..Default::default()
    };
    configure(&mut config);
    tlc_proxy::Proxy::start(&config.proxy_settings().unwrap(), sidecar)
        .await
        .unwrap()
}

/// Has `sidecar` read the partition graph TensorFlow would register, as it
/// does when the graph passes through it: the tensors it names get their
/// classes (dense ones their contexts).
pub fn teach(sidecar: &Sidecar, partition: PartitionBuilder) {
    let learned = sidecar
        .learn_graph(&partition.register_graph_request())
        .unwrap();
    assert!(learned.tensors > 0);
}

/// Sends `partition` as a `RegisterGraph` call through `client` (a
/// sidecar's listener), as a TF1 master does; the sidecars on the way read
/// it. The answer does not matter: test servers answer with whatever
/// they answer.
pub async fn register_graph(client: &Client, partition: PartitionBuilder) {
    let message = Bytes::from(partition.register_graph_request());
    let mut body = BytesMut::new();
    body.extend_from_slice(&[0]);
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    client
        .call(tlc_sidecar::graph::tap::REGISTER_GRAPH, &[], body.freeze())
        .await;
}
