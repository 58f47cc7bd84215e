//! What a peer or client that does not play by the rules can make a
//! sidecar hold: each test asserts the bound (memory, connections, who gets
//! a fallback), not only that nothing crashed.

/// Only its memory readings and its client that never reads are used here.
#[allow(dead_code)]
#[path = "support/hostile_hop.rs"]
mod hostile;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hostile::{never_reading_sender, peak_rss, reset_peak_rss};
use http::{HeaderMap, Request};
use hyper::body::Incoming;
use support::tf::{call_as_peer, envelope_body, recv, response_body, start_tensor_server};
use support::Client;
use tlc_codec::{Codec, EntropyStage, Sparsity};
use tlc_context::encode_stateless;
use tlc_core::Role;
use tlc_proxy::connection::Refusal;
use tlc_proxy::limits::settings::LimitSettings;
use tlc_sidecar::sidecar::Options;
use tlc_wire::envelope::EnvelopeHeader;
use tlc_wire::peer;
use tlc_wire::tf::recv_tensor;
use tlc_wire::tf::{grpc, RECV_TENSOR_PATH};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_3_g;0:0";

/// Another protocol on an intercepted port reaches its server as it would
/// without tlcd, through a pair of sidecars, both ways and untouched; it
/// is counted, and refused nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_protocols_are_forwarded_untouched() {
    use tokio::io::AsyncReadExt;
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = server.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 18];
                if socket.read_exact(&mut request).await.is_ok()
                    && request == b"GET / HTTP/1.1\r\n\r\n"
                {
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    let inbound_sidecar = Arc::new(support::compressing_sidecar());
    let outbound_sidecar = Arc::new(support::compressing_sidecar());
    let inbound = support::proxy(Role::Inbound, server_addr, inbound_sidecar.clone()).await;
    let outbound = support::proxy(
        Role::Outbound,
        inbound.local_addrs()[0],
        outbound_sidecar.clone(),
    )
    .await;
    let mut client = TcpStream::connect(outbound.local_addrs()[0]).await.unwrap();
    client.write_all(b"GET / HT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    client.write_all(b"TP/1.1\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer))
        .await
        .expect("no answer through the sidecars")
        .unwrap();
    assert_eq!(answer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    for sidecar in [&inbound_sidecar, &outbound_sidecar] {
        let connections = sidecar.stats().connections();
        assert_eq!(connections.opaque_total(), 1);
        assert!(connections.refusals().all(|(_, n)| n == 0));
    }
}

/// Tests that measure this process's memory run one at a time: the others
/// in this file hold little.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A holder sidecar stand-in: every RecvTensor gets `body` as an envelope;
/// fallbacks get the original, `original_elements` ones.
async fn start_holder(body: Bytes, original_elements: usize) -> SocketAddr {
    support::serve(Arc::new(move |request: Request<Incoming>| {
        let body = body.clone();
        Box::pin(async move {
            if request.uri().path() == peer::FALLBACK_PATH {
                let original =
                    response_body(&[original_elements as u64], &vec![1.0; original_elements]);
                return support::grpc_response(original, HeaderMap::new());
            }
            let mut response = support::grpc_response(body, HeaderMap::new());
            response
                .headers_mut()
                .insert(peer::ENVELOPE, peer::PROTOCOL.parse().unwrap());
            response
        })
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoding_stays_within_the_tensor_bound_and_the_in_flight_budget() {
    const MIB: u64 = 1 << 20;
    let options = Options {
        in_flight_bytes: 80 * MIB,
        max_tensor_bytes: 32 * MIB,
        memory_wait: Duration::from_secs(20),
        ..Options::default()
    };
    let _measuring = MEASURING.lock().await;
    reset_peak_rss();
    let before = peak_rss();

    // An envelope declaring 10^8 elements (400 MB) around a tiny payload:
    // refused before anything is allocated, and the original is fetched.
    let mut small = Vec::new();
    let codec = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    encode_stateless(&[0.0; 1000], codec, EntropyStage::Off, 7, &mut small).unwrap();
    let bomb = envelope_body(&[100_000_000], small);
    let sidecar = support::compressing_sidecar_with(options);
    let holder = start_holder(bomb, 1000).await;
    let proxy = support::proxy(Role::Outbound, holder, sidecar.clone()).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;
    let got = recv(&client, KEY, 1).await;
    assert_eq!(
        got.values,
        vec![1.0; 1000],
        "the original, through the fallback"
    );
    let totals = sidecar.stats().totals();
    assert_eq!(totals.decode_failures, 1);
    assert_eq!(totals.fallbacks, 1);

    // A real 3LC envelope of 8M zeros (32 MB decoded, a few KB on the wire),
    // asked 12 times at once: each decode charges 64 MB of an 80 MB budget,
    // so they take turns instead of holding 12 x 64 MB.
    let zeros = vec![0.0f32; 8 << 20];
    let mut envelope = Vec::new();
    encode_stateless(&zeros, codec, EntropyStage::Off, 9, &mut envelope).unwrap();
    drop(zeros);
    let wire = envelope.len();
    let body = envelope_body(&[8 << 20], envelope);
    let sidecar = support::compressing_sidecar_with(options);
    let holder = start_holder(body, 1).await;
    let proxy = support::proxy(Role::Outbound, holder, sidecar.clone()).await;
    let addr = proxy.local_addrs()[0];
    let calls: Vec<_> = (0..12)
        .map(|step| {
            tokio::spawn(async move {
                let client = Client::connect(addr).await;
                let reply = client
                    .call(RECV_TENSOR_PATH, &[], support::tf::request_body(KEY, step))
                    .await;
                assert_eq!(
                    reply
                        .trailers
                        .get("grpc-status")
                        .map(|v| v.to_str().unwrap()),
                    Some("0"),
                    "{:?}",
                    reply.headers
                );
                grpc::parse_single(reply.body, usize::MAX).unwrap().len()
            })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap() > 32 << 20, "the whole tensor");
    }
    assert_eq!(sidecar.stats().totals().restored, 12);
    assert_eq!(
        sidecar.in_flight().in_use_bytes,
        0,
        "every charge came back"
    );
    let grown = peak_rss().saturating_sub(before);
    eprintln!("envelope {wire} bytes; peak RSS grew {} MiB", grown >> 20);
    // 80 MiB of budget, the test's own 32 MiB of zeros, the clients'
    // copies of the answers in flight (each 32 MiB, read in parallel):
    // well under the 12 x 64 MiB the decodes would hold unbounded.
    assert!(grown < 480 * MIB, "peak RSS grew {} MiB", grown >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_cost_no_upstream_and_are_bounded_in_number_and_time() {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let dialled = Arc::new(AtomicUsize::new(0));
    {
        let dialled = dialled.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = upstream.accept().await {
                dialled.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
    }
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        max_connections: 8,
        handshake_seconds: 1,
        ..Default::default()
    };
    let proxy = support::proxy_configured(Role::Inbound, upstream_addr, sidecar.clone(), |c| {
        c.limits = limits
    })
    .await;
    let addr = proxy.local_addrs()[0];
    let connections = sidecar.stats().connections();
    let refused = |why: Refusal| {
        connections
            .refusals()
            .find(|(r, _)| *r == why)
            .map_or(0, |(_, n)| n)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut sockets = Vec::new();
    for _ in 0..40 {
        // A refused one may be reset before connect() returns here.
        if let Ok(socket) = TcpStream::connect(addr).await {
            sockets.push(socket);
        }
    }
    while refused(Refusal::Limit) < 32 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused(Refusal::Limit), 32, "40 sockets, 8 slots");
    assert_eq!(
        dialled.load(Ordering::SeqCst),
        0,
        "nothing dialled before a preface"
    );
    while refused(Refusal::Handshake) < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        refused(Refusal::Handshake),
        8,
        "closed after the handshake time"
    );
    assert_eq!(connections.open_now(), 0);
    assert_eq!(dialled.load(Ordering::SeqCst), 0);
}

/// The token of the envelope in a compressed response.
fn token_of(reply: &support::Reply) -> u64 {
    let message = grpc::parse_single(reply.body.clone(), usize::MAX).unwrap();
    let response = recv_tensor::decode_response(message).unwrap();
    let envelope = response.tensor.unwrap().tensor_content;
    EnvelopeHeader::parse(&envelope).unwrap().fallback_token
}

async fn ask_fallback(client: &Client, token: u64) -> support::Reply {
    let token = format!("{token:x}");
    client
        .call(
            peer::FALLBACK_PATH,
            &[(peer::PEER, peer::PROTOCOL), (peer::FALLBACK, &token)],
            Bytes::new(),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_goes_only_to_the_connection_its_envelope_went_to() {
    let values: Vec<f32> = (0..40_000).map(|i| (i as f32 * 0.1).sin()).collect();
    let served = values.clone();
    let tf = start_tensor_server(Arc::new(move |_, _| (vec![40_000], served.clone()))).await;
    let sidecar = support::metrics::compressing_unclassified();
    let proxy = support::proxy(Role::Inbound, tf, sidecar.clone()).await;
    let addr = proxy.local_addrs()[0];
    let owner = Client::connect(addr).await;
    let thief = Client::connect(addr).await;
    let first = call_as_peer(&owner, KEY, 1).await;
    let second = call_as_peer(&owner, KEY, 2).await;
    assert!(peer::has_envelope(&first.headers), "compressed for a peer");
    let (a, b) = (token_of(&first), token_of(&second));
    assert!(
        a.abs_diff(b) > 1 << 32,
        "tokens {a:x} and {b:x} are not a sequence"
    );

    // Another connection: neither the token it saw nor its neighbours work.
    for guess in [a, a.wrapping_add(1), b] {
        let stolen = ask_fallback(&thief, guess).await;
        assert_eq!(
            stolen
                .trailers
                .get("grpc-status")
                .or(stolen.headers.get("grpc-status"))
                .unwrap(),
            "5"
        );
        assert!(stolen.body.is_empty());
    }
    // The owner still gets its original, byte for byte.
    let original = ask_fallback(&owner, a).await;
    assert_eq!(original.trailers["grpc-status"], "0");
    let message = grpc::parse_single(original.body, usize::MAX).unwrap();
    let response = recv_tensor::decode_response(message).unwrap();
    let tensor = recv_tensor::classify(&response).unwrap();
    assert_eq!(tensor.values().collect::<Vec<_>>(), values);
    assert_eq!(sidecar.stats().totals().fallbacks_served, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_connection_closed_for_idleness_is_unseen_by_tensorflow() {
    let values: Vec<f32> = (0..40_000).map(|i| i as f32).collect();
    let served = values.clone();
    let tf = start_tensor_server(Arc::new(move |_, _| (vec![40_000], served.clone()))).await;
    let holder = Arc::new(support::compressing_sidecar());
    let idle = LimitSettings {
        idle_seconds: 1,
        ..Default::default()
    };
    let inbound =
        support::proxy_configured(Role::Inbound, tf, holder.clone(), |c| c.limits = idle).await;
    let requester = Arc::new(support::compressing_sidecar());
    let outbound =
        support::proxy(Role::Outbound, inbound.local_addrs()[0], requester.clone()).await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    let first = recv(&client, KEY, 1).await;
    assert_eq!(first.values.len(), 40_000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while holder.stats().connections().idle_closed_total() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(holder.stats().connections().idle_closed_total(), 1);
    // TensorFlow's connection to its own sidecar is still there, and its
    // next call goes through on a new connection between the sidecars.
    let second = recv(&client, KEY, 2).await;
    assert_eq!(second.values.len(), 40_000);
    assert_eq!(requester.stats().totals().decode_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_hold_no_more_than_the_budget() {
    const MIB: u64 = 1 << 20;
    // HOSTILE_IN_FLIGHT_MIB=4096 lifts the budget, to see what it bounds:
    // peak RSS then grew 796 MiB (717 MiB charged) where 32 MiB gave 142-211.
    let in_flight = std::env::var("HOSTILE_IN_FLIGHT_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    // A 4 MiB tensor, served from one buffer (the stand-in copies nothing).
    let tensor: Vec<f32> = (0..(1 << 20)).map(|i| i as f32).collect();
    let body = response_body(&[1 << 20], &tensor);
    drop(tensor);
    let tf = support::serve(Arc::new(move |_request: Request<Incoming>| {
        let body = body.clone();
        Box::pin(async move { support::grpc_response(body, HeaderMap::new()) })
    }))
    .await;
    let options = Options {
        in_flight_bytes: in_flight * MIB,
        ..Options::default()
    };
    let sidecar = support::compressing_sidecar_with(options);
    let proxy = support::proxy(Role::Inbound, tf, sidecar.clone()).await;
    let addr = proxy.local_addrs()[0];
    let _measuring = MEASURING.lock().await;
    reset_peak_rss();
    let before = peak_rss();
    // 8 connections x 64 calls x 4 MiB = 2 GiB asked for, never read.
    let mut held = Vec::new();
    for _ in 0..8 {
        let sender = never_reading_sender(addr).await;
        let mut calls = Vec::new();
        for step in 0..64 {
            let request = Request::post(format!("http://{addr}{RECV_TENSOR_PATH}"))
                .header("content-type", "application/grpc")
                .body(http_body_util::Full::new(support::tf::request_body(
                    KEY, step,
                )))
                .unwrap();
            let mut sender = sender.clone();
            calls.push(tokio::spawn(
                async move { sender.send_request(request).await },
            ));
        }
        held.push((sender, calls));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = peak_rss().saturating_sub(before);
    eprintln!(
        "in-flight budget {in_flight} MiB: {} MiB charged, peak RSS grew {} MiB",
        sidecar.in_flight().in_use_bytes >> 20,
        grown >> 20
    );
    assert!(sidecar.in_flight().in_use_bytes <= in_flight * MIB);
    // The budget, and the hop to the stand-in (8 MiB windows per
    // connection, and hyper's buffers around them): 142-211 MiB in three
    // runs, where the same test without the budget grew 796 MiB.
    assert!(grown < 400 * MIB, "peak RSS grew {} MiB", grown >> 20);
    // Let the clients go, so that their connections end cleanly.
    for (sender, calls) in held {
        drop(sender);
        calls.into_iter().for_each(|c| c.abort());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requesters_invented_by_a_peer_cannot_grow_the_contexts_past_their_bound() {
    const TABLE: usize = 4 << 20;
    let values: Vec<f32> = (0..16_384).map(|i| (i as f32 * 0.01).sin()).collect();
    let tf = start_tensor_server(Arc::new(move |_, _| (vec![16_384], values.clone()))).await;
    let mut options = Options::default();
    options.push_limits.max_bytes = TABLE;
    let sidecar = support::compressing_sidecar_with(options);
    let proxy = support::proxy(Role::Inbound, tf, sidecar.clone()).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;
    let headers = [
        (peer::PEER, peer::PROTOCOL),
        (peer::CLASS, "dense_gradient"),
    ];
    let mut compressed = 0;
    for task in 0..1000 {
        // A gradient of worker 0 for a parameter task that does not exist.
        let key = format!(
            "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;\
             /job:ps/replica:0/task:{task}/device:CPU:0;edge_3_g;0:0"
        );
        let reply = client
            .call(
                RECV_TENSOR_PATH,
                &headers,
                support::tf::request_body(&key, 1),
            )
            .await;
        assert_eq!(reply.trailers["grpc-status"], "0");
        compressed += usize::from(peer::has_envelope(&reply.headers));
    }
    let stats = sidecar.table_sizes().push;
    eprintln!(
        "{compressed} of 1000 compressed; {} push contexts, {} KiB",
        stats.contexts,
        stats.memory_bytes >> 10
    );
    assert!(compressed > 0);
    assert!(stats.memory_bytes <= TABLE, "{} bytes", stats.memory_bytes);
    assert!(stats.contexts <= TABLE / (16_384 * 4));
}
