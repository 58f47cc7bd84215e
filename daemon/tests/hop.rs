//! Lossless compression between two sidecars: every message that is not an
//! envelope crosses zstd-compressed, requests against the previous one of
//! the same call; TensorFlow on either side sees exactly its own bytes.

mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request};
use hyper::body::Incoming;
use support::{start_echo_server, Client};
use tlc_core::Role;
use tlc_proxy::grpc_status;

/// A gRPC-framed message that repeats, as TensorFlow's control calls do,
/// with `step` changing a few bytes.
fn control_call(step: u8) -> Bytes {
    let mut message = Vec::new();
    for field in 0..6u8 {
        message.extend_from_slice(b"/job:ps/replica:0/task:0/device:CPU:0;edge_");
        message.extend_from_slice(&[b'0' + field, b';', step]);
    }
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    Bytes::from(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_compressed_both_ways_and_arrive_unchanged() {
    let server = start_echo_server().await;
    let holder = Arc::new(support::compressing_sidecar());
    let requester = Arc::new(support::compressing_sidecar());
    let holder_proxy = support::proxy(Role::Inbound, server, Arc::clone(&holder)).await;
    let requester_proxy = support::proxy(
        Role::Outbound,
        holder_proxy.local_addrs()[0],
        Arc::clone(&requester),
    )
    .await;
    let client = Client::connect(requester_proxy.local_addrs()[0]).await;
    for step in 0..6 {
        let body = control_call(step);
        let reply = client
            .call("/tensorflow.WorkerService/RunGraph", &[], body.clone())
            .await;
        // The echo server saw exactly the bytes sent (its reply is them),
        // and the client got them back exactly.
        assert_eq!(reply.body, body, "step {step}");
        assert_eq!(reply.trailers["x-len"], body.len().to_string().as_str());
        // Short on the hop from the second call on, in full at TensorFlow.
        assert_eq!(
            reply.trailers["x-path"],
            "/tensorflow.WorkerService/RunGraph"
        );
        assert!(!reply.headers.contains_key("grpc-encoding"));
        assert!(
            !reply.headers.keys().any(|k| k.as_str().starts_with("tlc-")),
            "{:?}",
            reply.headers
        );
    }
    let sent = requester.stats().totals().hop;
    let held = holder.stats().totals().hop;
    // Answers: compressed by the holder's sidecar, restored by the requester's.
    assert_eq!(held.compressed.messages, 6);
    assert_eq!(sent.restored, held.compressed);
    // Requests: from the second on (the peer is known once it answered),
    // against the one before from the third on: a few dozen bytes each,
    // where zstd alone makes the second about 80.
    assert_eq!(sent.compressed.messages, 5);
    assert_eq!(held.restored, sent.compressed);
    assert!(
        sent.compressed.wire_bytes * 5 < sent.compressed.raw_bytes,
        "{sent:?}"
    );
    assert_eq!(
        (sent.failures, held.failures, sent.reference_misses),
        (0, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_the_holder_lost_costs_one_retry_not_the_call() {
    let server = start_echo_server().await;
    let requester = Arc::new(support::compressing_sidecar());
    let first_holder = Arc::new(support::compressing_sidecar());
    let holder_proxy = support::proxy(Role::Inbound, server, first_holder).await;
    let holder_addr = holder_proxy.local_addrs()[0];
    let requester_proxy = support::proxy(Role::Outbound, holder_addr, Arc::clone(&requester)).await;
    let client = Client::connect(requester_proxy.local_addrs()[0]).await;
    for step in 0..3 {
        let body = control_call(step);
        assert_eq!(client.call("/x.Y/Z", &[], body.clone()).await.body, body);
    }
    // The holder's sidecar restarts on the same port: its references are gone.
    holder_proxy.shutdown().await;
    let second_holder = Arc::new(support::compressing_sidecar());
    let _again = support::proxy_at(Role::Inbound, holder_addr, server, second_holder).await;
    for step in 3..6 {
        let body = control_call(step);
        assert_eq!(
            client.call("/x.Y/Z", &[], body.clone()).await.body,
            body,
            "step {step}"
        );
    }
    let sent = requester.stats().totals().hop;
    assert_eq!(sent.reference_misses, 1, "{sent:?}");
    assert_eq!(sent.failures, 0);
}

/// A holder's sidecar of an older build: marks its answers as a sidecar's
/// that restores short paths (as a newer build did before it restarted),
/// but answers a short path `UNIMPLEMENTED`, as TensorFlow would. Records
/// every path it is called with, and whether the call had a
/// `content-length`.
async fn forgetful_holder(paths: Arc<Mutex<Vec<(String, bool)>>>) -> std::net::SocketAddr {
    support::serve(Arc::new(move |request: Request<Incoming>| {
        let paths = Arc::clone(&paths);
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            let sized = request.headers().contains_key("content-length");
            paths.lock().unwrap().push((path.clone(), sized));
            let mut response = if path.starts_with("/~") {
                grpc_status::response(grpc_status::UNIMPLEMENTED, "unknown method")
            } else {
                support::grpc_response(Bytes::from_static(b"answer"), HeaderMap::new())
            };
            tlc_wire::peer::mark_hop(response.headers_mut());
            tlc_wire::peer::mark_short_paths(response.headers_mut());
            response
        })
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_path_the_holder_does_not_know_costs_one_retry_not_the_call() {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let holder = forgetful_holder(Arc::clone(&paths)).await;
    let requester = Arc::new(support::compressing_sidecar());
    let requester_proxy = support::proxy(Role::Outbound, holder, Arc::clone(&requester)).await;
    let client = Client::connect(requester_proxy.local_addrs()[0]).await;
    const RUN_GRAPH: &str = "/tensorflow.WorkerService/RunGraph";
    for step in 0..3 {
        let reply = client.call(RUN_GRAPH, &[], control_call(step)).await;
        assert_eq!(reply.body, Bytes::from_static(b"answer"), "step {step}");
    }
    // The first call goes in full and as it came, with the client's
    // content-length (the peer is not known yet); then each goes short and
    // compressed, without one, is refused, and goes again in full.
    let short = tlc_wire::short_path::shorten(RUN_GRAPH).unwrap();
    let recorded = paths.lock().unwrap().clone();
    // The requester also asked this holder for a session (which it, no
    // sidecar, answered without taking): not a call of the client's.
    let paths: Vec<(&str, bool)> = recorded
        .iter()
        .filter(|(p, _)| p != tlc_proxy::mux::frame::PATH)
        .map(|(p, sized)| (p.as_str(), *sized))
        .collect();
    assert_eq!(
        paths,
        [
            (RUN_GRAPH, true),
            (short, false),
            (RUN_GRAPH, false),
            (short, false),
            (RUN_GRAPH, false)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_refuses_short_paths_it_does_not_know_and_only_from_sidecars() {
    let server = start_echo_server().await;
    let holder = Arc::new(support::compressing_sidecar());
    let holder_proxy = support::proxy(Role::Inbound, server, holder).await;
    let client = Client::connect(holder_proxy.local_addrs()[0]).await;
    let body = control_call(0);
    // From a sidecar: a known short path is put back, an unknown one refused.
    let reply = client.call("/~5", &[("tlc-hop", "1")], body.clone()).await;
    assert_eq!(
        reply.trailers["x-path"],
        "/tensorflow.WorkerService/RunGraph"
    );
    assert_eq!(reply.headers["tlc-hop-paths"], "1");
    let reply = client
        .call("/~999", &[("tlc-hop", "1")], body.clone())
        .await;
    assert_eq!(reply.headers["grpc-status"], "12");
    assert!(reply.body.is_empty());
    // From anyone else, a path is only a path.
    let reply = client.call("/~5", &[], body.clone()).await;
    assert_eq!(reply.trailers["x-path"], "/~5");
}
