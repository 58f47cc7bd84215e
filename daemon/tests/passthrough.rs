//! The proxy forwards any call unchanged: headers, large bodies, trailers,
//! many concurrent calls; an unreachable upstream is a gRPC status.

mod support;

use bytes::Bytes;
use support::{start_echo_server, Client};
use tlc_core::Role;
use tlc_proxy::Proxy;
use tlc_sidecar::Sidecar;

async fn proxy_to(upstream: std::net::SocketAddr) -> Proxy<Sidecar> {
    support::proxy(Role::Outbound, upstream, Default::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_bodies_headers_and_trailers() {
    let server = start_echo_server().await;
    let proxy = proxy_to(server).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;

    let reply = client
        .call(
            "/tensorflow.WorkerService/GetStatus",
            &[("x-echo", "kept")],
            Bytes::from_static(b"\0\0\0\0\x02hi"),
        )
        .await;
    assert_eq!(reply.body.as_ref(), b"\0\0\0\0\x02hi");
    assert_eq!(reply.headers["x-echo"], "kept");
    assert_eq!(reply.trailers["grpc-status"], "0");
    assert_eq!(
        reply.trailers["x-path"],
        "/tensorflow.WorkerService/GetStatus"
    );

    // 48 MiB in one call: larger than any window, so flow control is exercised.
    let big: Bytes = (0..48u32 << 20)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let reply = client
        .call("/tensorflow.WorkerService/RecvTensor", &[], big.clone())
        .await;
    assert_eq!(reply.body.len(), big.len());
    assert!(reply.body == big);
    assert_eq!(reply.trailers["x-len"], big.len().to_string());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_share_one_connection() {
    let server = start_echo_server().await;
    let proxy = proxy_to(server).await;
    let client = std::sync::Arc::new(Client::connect(proxy.local_addrs()[0]).await);
    let calls: Vec<_> = (0..200u32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let body = Bytes::from(vec![(i % 256) as u8; 1000 + i as usize * 37]);
                let reply = client.call("/x.Y/Z", &[], body.clone()).await;
                assert_eq!(reply.body, body);
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    proxy.shutdown().await;
}

/// The connection at `addr` is reset or closed without a byte of HTTP/2.
async fn assert_refused(addr: std::net::SocketAddr) {
    use tokio::io::AsyncReadExt;
    // The reset may even beat the end of the connect.
    let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let mut buf = [0u8; 16];
    match tcp.read(&mut buf).await {
        Ok(0) => {}
        Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}"),
        Ok(n) => panic!("the proxy spoke {n} bytes to the caller"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_looks_like_a_refused_connection() {
    // A port that was just free: nothing listens there.
    let free = support::process::free_addr();
    let proxy = proxy_to(free).await;
    // The caller's connection is reset before any HTTP/2 is spoken, so a
    // gRPC client treats it as a failed connect and retries later, as it
    // would without a sidecar; no call is answered with an error status.
    assert_refused(proxy.local_addrs()[0]).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_sidecars_passes_the_refusal_back() {
    // Requester sidecar -> holder sidecar -> nothing: the holder's sidecar
    // resets, so the requester's sidecar sees no answer and resets too.
    let free = support::process::free_addr();
    let holder = support::proxy(Role::Inbound, free, Default::default()).await;
    let requester = proxy_to(holder.local_addrs()[0]).await;
    assert_refused(requester.local_addrs()[0]).await;

    // Once the task listens, the same chain works.
    let server = support::start_echo_server().await;
    let holder = support::proxy(Role::Inbound, server, Default::default()).await;
    let requester = proxy_to(holder.local_addrs()[0]).await;
    let client = Client::connect(requester.local_addrs()[0]).await;
    let reply = client.call("/x.Y/Z", &[], Bytes::from_static(b"ok")).await;
    assert_eq!(reply.body.as_ref(), b"ok");
}

/// An explicit route's upstream may be a DNS name (a VM across regions, a
/// Kubernetes Service): looked up for each new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_to_a_name_reaches_what_the_name_resolves_to() {
    let server = start_echo_server().await;
    let config = tlc_daemon::config::Config {
        routes: vec![tlc_daemon::config::Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: format!("localhost:{}", server.port()).parse().unwrap(),
            role: Role::Outbound,
        }],
        ..Default::default()
    };
    config.validate().unwrap();
    let sidecar = std::sync::Arc::new(support::compressing_sidecar());
    let proxy = Proxy::start(&config.proxy_settings().unwrap(), sidecar)
        .await
        .unwrap();
    let client = Client::connect(proxy.local_addrs()[0]).await;
    let reply = client
        .call(
            "/tensorflow.WorkerService/GetStatus",
            &[],
            Bytes::from_static(b"\0\0\0\0\x02hi"),
        )
        .await;
    assert_eq!(reply.body.as_ref(), b"\0\0\0\0\x02hi");
    proxy.shutdown().await;

    // A name that does not resolve: the connection is closed, as an
    // unreachable upstream's is; TensorFlow retries.
    let config = tlc_daemon::config::Config {
        routes: vec![tlc_daemon::config::Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: "no-such-host.invalid:2222".parse().unwrap(),
            role: Role::Outbound,
        }],
        ..Default::default()
    };
    let sidecar = std::sync::Arc::new(support::compressing_sidecar());
    let proxy = Proxy::start(&config.proxy_settings().unwrap(), sidecar)
        .await
        .unwrap();
    assert_refused(proxy.local_addrs()[0]).await;
    proxy.shutdown().await;
}
