//! Lossless compression between two sidecars: every message that is not an
//! envelope crosses zstd-compressed, requests against the previous one of
//! the same call; TensorFlow on either side sees exactly its own bytes.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use support::{start_echo_server, Client};
use tlc_core::Role;
use tlc_sidecar::Sidecar;

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
    let holder = Arc::new(Sidecar::default());
    let requester = Arc::new(Sidecar::default());
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
        assert!(!reply.headers.contains_key("grpc-encoding"));
        assert!(!reply.headers.contains_key("tlc-hop"));
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
    let requester = Arc::new(Sidecar::default());
    let first_holder = Arc::new(Sidecar::default());
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
    let second_holder = Arc::new(Sidecar::default());
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
