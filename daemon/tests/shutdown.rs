//! Shutdown never takes a connection from TensorFlow that it still uses:
//! a draining proxy stops accepting but keeps serving established
//! connections (new calls on them included) until their task ends them,
//! for at most `drain_seconds`.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use hyper::body::Incoming;
use support::{grpc_response, Client};
use tlc_core::Role;
use tlc_proxy::Proxy;
use tlc_sidecar::Sidecar;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// An h2c echo server that can be stopped for good: listener and every
/// connection closed, as when its process exits.
struct StoppableServer {
    addr: SocketAddr,
    tasks: JoinSet<()>,
}

impl StoppableServer {
    async fn start() -> StoppableServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                connections.spawn(async move {
                    let service =
                        hyper::service::service_fn(|request: Request<Incoming>| async move {
                            use http_body_util::BodyExt;
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            Ok::<_, std::convert::Infallible>(grpc_response(
                                body,
                                Default::default(),
                            ))
                        });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        StoppableServer { addr, tasks }
    }

    /// Closes the listener and every connection.
    async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// A route whose drain waits at most `drain_seconds`, the setting under test.
async fn proxy(role: Role, upstream: SocketAddr, drain_seconds: u64) -> Proxy<Sidecar> {
    support::proxy_configured(role, upstream, Default::default(), |config| {
        config.drain_seconds = drain_seconds
    })
    .await
}

async fn echo(client: &Client, text: &'static str) -> Bytes {
    client
        .call("/x.Y/Z", &[], Bytes::from_static(text.as_bytes()))
        .await
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_proxy_serves_its_connections_until_the_task_closes_them() {
    let server = StoppableServer::start().await;
    let proxy = proxy(Role::Outbound, server.addr, 30).await;
    let listen = proxy.local_addrs()[0];
    let client = Client::connect(listen).await;
    assert_eq!(echo(&client, "before").await, "before");

    let draining = tokio::spawn(proxy.drain());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The connection TensorFlow opened goes on, new calls included.
    for _ in 0..5 {
        assert_eq!(echo(&client, "during").await, "during");
    }
    assert!(
        !draining.is_finished(),
        "the drain ended with a connection in use"
    );
    // No new connections: the listener is closed, its port free again.
    assert!(
        tokio::net::TcpStream::connect(listen).await.is_err(),
        "a draining proxy accepted a new connection"
    );

    // TensorFlow closes its connection: the drain ends at once, not after
    // drain_seconds.
    let closed = Instant::now();
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), draining)
        .await
        .expect("the drain waited on after the last connection closed")
        .unwrap();
    assert!(closed.elapsed() < Duration::from_secs(5));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_connection_ends_once_the_task_behind_it_is_gone() {
    // Inbound: a peer's sidecar keeps its connection open; the drain must
    // end it once the local task has exited, not wait for drain_seconds.
    let task = StoppableServer::start().await;
    let proxy = proxy(Role::Inbound, task.addr, 30).await;
    let peer = Client::connect(proxy.local_addrs()[0]).await;
    assert_eq!(echo(&peer, "hello").await, "hello");

    let draining = tokio::spawn(proxy.drain());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !draining.is_finished(),
        "the drain closed a peer's connection while its task was still there"
    );
    assert_eq!(echo(&peer, "still").await, "still");

    task.stop().await;
    tokio::time::timeout(Duration::from_secs(5), draining)
        .await
        .expect("the drain did not notice that the task had exited")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_seconds_bounds_the_wait() {
    let server = StoppableServer::start().await;
    let proxy = proxy(Role::Outbound, server.addr, 2).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;
    assert_eq!(echo(&client, "x").await, "x");
    let started = Instant::now();
    // The client never closes: the drain gives up after drain_seconds.
    tokio::time::timeout(Duration::from_secs(6), proxy.drain())
        .await
        .expect("the drain outlasted drain_seconds");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "the drain ended after {took:?}, long before drain_seconds = 2"
    );
    drop(client);
    server.stop().await;
}
