//! What a hostile peer sidecar can make hop compression hold: requests
//! gathered whole that never finish, answers that restore far beyond what
//! crossed, references by the hundred thousand. Each test asserts the
//! bound (the in-flight budget, the per-answer cap, resident memory), on
//! real sockets.

#[path = "support/hostile_hop.rs"]
mod hostile;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hostile::{
    bomb_holder, counting_server, head_status, never_reading_sender, one_message, peak_rss,
    reset_peak_rss, rss, unfinished_request, unfinished_sender, RUN_GRAPH,
};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::Client;
use tlc_core::Role;
use tlc_sidecar::sidecar::{Options, Sidecar};
use tokio::net::TcpStream;

const MIB: u64 = 1 << 20;

/// Tests that measure this process's memory run one at a time; the others
/// take the same lock, so that none of them is measured with another.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The most `sidecar` had charged to its in-flight budget, sampled every
/// 20 ms for `watch_for`: how each test here sees what a hostile peer
/// made it hold.
async fn most_charged(sidecar: &Sidecar, watch_for: Duration) -> u64 {
    let mut most = 0;
    let watch = Instant::now();
    while watch.elapsed() < watch_for {
        most = most.max(sidecar.in_flight().in_use_bytes);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    most
}

/// A holder's sidecar, in front of a TensorFlow that counts the calls
/// reaching it: an in-flight budget of `budget` bytes, and a compressed
/// request gathered for `gather` at most.
struct CountingHolder {
    sidecar: Arc<Sidecar>,
    /// Calls that reached TensorFlow.
    arrived: Arc<AtomicUsize>,
    /// Where peers reach the holder's proxy.
    addr: SocketAddr,
    _proxy: tlc_proxy::Proxy<Sidecar>,
}

impl CountingHolder {
    async fn start(budget: u64, gather: Duration) -> CountingHolder {
        let options = Options {
            in_flight_bytes: budget,
            gather,
            ..Options::default()
        };
        let sidecar = support::compressing_sidecar_with(options);
        let arrived = Arc::new(AtomicUsize::new(0));
        let tf = counting_server(Arc::clone(&arrived)).await;
        let proxy = support::proxy(Role::Inbound, tf, Arc::clone(&sidecar)).await;
        CountingHolder {
            sidecar,
            arrived,
            addr: proxy.local_addrs()[0],
            _proxy: proxy,
        }
    }
}

/// The answer to `call`, which must come within `limit` (`late` says what
/// it means if not) and refuse it as TensorFlow refuses an encoding it
/// does not know: `UNIMPLEMENTED`, so that a requester sends it again
/// uncompressed.
async fn refused_within(
    call: tokio::task::JoinHandle<hyper::Result<Response<Incoming>>>,
    limit: Duration,
    late: &str,
) -> Response<Incoming> {
    let response = tokio::time::timeout(limit, call)
        .await
        .expect(late)
        .unwrap()
        .unwrap();
    assert_eq!(head_status(&response).as_deref(), Some("12"));
    response
}

/// Row 3, the holder: 4 connections x 1000 streams, each 60 KB of a
/// hop-compressed request that never ends. Today's code gathers all of it,
/// uncharged and without a time limit; here what is gathered is charged to
/// the in-flight budget (and refused beyond it), and every call is answered
/// in time, as TensorFlow refuses an encoding it does not know, so that a
/// real requester sends it again uncompressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_compressed_requests_are_charged_and_refused_in_time() {
    const BUDGET: u64 = 16 * MIB;
    let holder = CountingHolder::start(BUDGET, Duration::from_secs(2)).await;
    let addr = holder.addr;
    let _measuring = MEASURING.lock().await;
    reset_peak_rss();
    let before = peak_rss();
    let chunk = Bytes::from(vec![7u8; 60_000]);
    let hop = [("tlc-hop", "1"), ("grpc-encoding", "zstd")];
    let mut calls = Vec::new();
    for _ in 0..4 {
        let sender = unfinished_sender(addr).await;
        for _ in 0..1000 {
            let mut sender = sender.clone();
            let request = unfinished_request(addr, &hop, chunk.clone());
            calls.push(tokio::spawn(
                async move { sender.send_request(request).await },
            ));
        }
    }
    // While they gather: charged, within the budget.
    let most = most_charged(&holder.sidecar, Duration::from_millis(1500)).await;
    let grown = peak_rss().saturating_sub(before);
    eprintln!(
        "holder: {} KiB of unfinished requests charged at most; peak RSS grew {} MiB",
        most >> 10,
        grown >> 20
    );
    assert!(
        most > 0,
        "gathered bytes are charged to the in-flight budget"
    );
    assert!(most <= BUDGET);
    // Every call answered within the gather time (and some slack), as
    // TensorFlow refuses an unknown encoding; none reached TensorFlow.
    let mut refused = 0;
    for call in calls {
        let late = "a call still gathered past limits.gather_seconds";
        let response = refused_within(call, Duration::from_secs(5), late).await;
        assert!(!response.headers().contains_key("tlc-hop"));
        refused += 1;
    }
    assert_eq!(refused, 4000);
    assert_eq!(holder.arrived.load(Ordering::SeqCst), 0);
    assert_eq!(
        holder.sidecar.in_flight().in_use_bytes,
        0,
        "every charge came back"
    );
    let grown = peak_rss().saturating_sub(before);
    eprintln!("holder: peak RSS grew {} MiB in all", grown >> 20);
    // The budget, and hyper's windows (16 MiB a connection from a peer).
    assert!(grown < 160 * MIB, "peak RSS grew {} MiB", grown >> 20);
    let hop = holder.sidecar.stats().totals().hop;
    assert_eq!(
        hop.refused.gather_budget + hop.refused.gather_time,
        4000,
        "{hop:?}"
    );
    assert!(hop.refused.gather_time > 0 && hop.refused.gather_budget > 0);
}

/// Row 3: nothing is charged on a peer's say-so: a compressed request
/// that declares 60 000 bytes and sends 1 000 holds the 1 000 (a KiB, the
/// budget's unit), until its gather time is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_charged_for_what_arrived_not_what_it_declares() {
    let _measuring = MEASURING.lock().await;
    let holder = CountingHolder::start(16 * MIB, Duration::from_secs(1)).await;
    let addr = holder.addr;
    let mut sender = unfinished_sender(addr).await;
    let headers = [
        ("tlc-hop", "1"),
        ("grpc-encoding", "zstd"),
        ("content-length", "60000"),
    ];
    let request = unfinished_request(addr, &headers, Bytes::from(vec![7u8; 1000]));
    let call = tokio::spawn(async move { sender.send_request(request).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        holder.sidecar.in_flight().in_use_bytes,
        1024,
        "what arrived, in KiB"
    );
    let late = "refused once its gather time is up";
    refused_within(call, Duration::from_secs(3), late).await;
    assert_eq!(holder.sidecar.in_flight().in_use_bytes, 0);
    assert_eq!(holder.sidecar.stats().totals().hop.refused.gather_time, 1);
    assert_eq!(holder.arrived.load(Ordering::SeqCst), 0);
}

/// Row 3, what a real requester makes of the holder's refusal: a peer
/// holds the holder's whole budget with unfinished compressed requests;
/// TensorFlow's call, compressed by its sidecar, is refused by the holder's
/// and sent again uncompressed: it arrives whole, nothing lost, and the
/// holder stays known as a sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_compressed_request_goes_again_uncompressed_and_arrives_whole() {
    const BUDGET: u64 = MIB;
    let _measuring = MEASURING.lock().await;
    let tf = support::start_echo_server().await;
    let options = Options {
        in_flight_bytes: BUDGET,
        gather: Duration::from_secs(2),
        ..Options::default()
    };
    let holder = support::compressing_sidecar_with(options);
    let holder_proxy = support::proxy(Role::Inbound, tf, Arc::clone(&holder)).await;
    let holder_addr = holder_proxy.local_addrs()[0];
    let requester = Arc::new(support::compressing_sidecar());
    let requester_proxy = support::proxy(Role::Outbound, holder_addr, Arc::clone(&requester)).await;
    let client = Client::connect(requester_proxy.local_addrs()[0]).await;
    let call = |step: u8| {
        let mut message = b"/job:ps/replica:0/task:0/device:CPU:0;edge_1;".repeat(4);
        message.push(step);
        one_message(&message)
    };
    // The holder is known as a sidecar once it has answered.
    let body = call(0);
    assert_eq!(client.call(RUN_GRAPH, &[], body.clone()).await.body, body);
    // A hostile peer fills the holder's budget to the last KiB.
    let hop = [("tlc-hop", "1"), ("grpc-encoding", "zstd")];
    let sender = unfinished_sender(holder_addr).await;
    let mut hostile = Vec::new();
    for chunk in [60_000, 1000] {
        for _ in 0..40 {
            let mut sender = sender.clone();
            let request = unfinished_request(holder_addr, &hop, Bytes::from(vec![7u8; chunk]));
            hostile.push(tokio::spawn(
                async move { sender.send_request(request).await },
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        holder.in_flight().in_use_bytes,
        BUDGET,
        "the peer holds it all"
    );
    let body = call(1);
    let reply = client.call(RUN_GRAPH, &[], body.clone()).await;
    assert_eq!(reply.body, body, "TensorFlow's bytes, exactly");
    assert_eq!(reply.trailers["grpc-status"], "0");
    let sent = requester.stats().totals().hop;
    let held = holder.stats().totals().hop;
    eprintln!(
        "refused by the holder: {:?}; resent by the requester: {}",
        held.refused, sent.resent
    );
    assert!(held.refused.gather_budget >= 1);
    assert_eq!(sent.resent, 1);
    // Still a known sidecar: the next call goes compressed.
    let before = sent.compressed.messages;
    let body = call(2);
    assert_eq!(client.call(RUN_GRAPH, &[], body.clone()).await.body, body);
    assert!(requester.stats().totals().hop.compressed.messages > before);
    hostile.into_iter().for_each(|c| c.abort());
}

/// Row 3, the requester: TensorFlow's request gathered whole to be
/// compressed is charged while it is gathered, and one that does not end
/// in time goes on as it came, uncompressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requesters_own_gathering_is_charged_and_timed() {
    let _measuring = MEASURING.lock().await;
    let arrived = Arc::new(AtomicUsize::new(0));
    let tf = counting_server(Arc::clone(&arrived)).await;
    let holder = Arc::new(support::compressing_sidecar());
    let holder_proxy = support::proxy(Role::Inbound, tf, holder).await;
    let options = Options {
        gather: Duration::from_secs(1),
        ..Options::default()
    };
    let requester = support::compressing_sidecar_with(options);
    let requester_proxy = support::proxy(
        Role::Outbound,
        holder_proxy.local_addrs()[0],
        Arc::clone(&requester),
    )
    .await;
    let addr = requester_proxy.local_addrs()[0];
    // One call, so that the holder is known as a sidecar.
    let client = Client::connect(addr).await;
    let reply = client.call(RUN_GRAPH, &[], one_message(b"hello")).await;
    assert_eq!(reply.trailers["grpc-status"], "0");
    assert_eq!(arrived.load(Ordering::SeqCst), 1);
    let mut sender = unfinished_sender(addr).await;
    let first = Bytes::from(vec![3u8; 20_000]);
    let request = unfinished_request(addr, &[], first);
    let call = tokio::spawn(async move { sender.send_request(request).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let charged = requester.in_flight().in_use_bytes;
    eprintln!("requester: {charged} bytes charged while gathering");
    assert!(charged >= 20_000, "gathering is charged: {charged}");
    // Past the gather time: on as it came, and the charge given back.
    let deadline = Instant::now() + Duration::from_secs(4);
    while arrived.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(arrived.load(Ordering::SeqCst), 2, "the request went on");
    assert_eq!(requester.in_flight().in_use_bytes, 0);
    call.abort();
}

/// A requester's sidecar, behind its proxy, whose holder answers with
/// `messages` messages that each restore to 1 MiB: an in-flight budget of
/// `budget` bytes, and `cap` bytes restored per answer at most.
struct BombedRequester {
    sidecar: Arc<Sidecar>,
    /// Where TensorFlow reaches the requester's proxy.
    addr: SocketAddr,
    _proxy: tlc_proxy::Proxy<Sidecar>,
}

impl BombedRequester {
    async fn start(messages: usize, budget: u64, cap: u64) -> BombedRequester {
        let holder = bomb_holder(messages).await;
        let options = Options {
            in_flight_bytes: budget,
            max_tensor_bytes: cap,
            ..Options::default()
        };
        let sidecar = support::compressing_sidecar_with(options);
        let proxy = support::proxy(Role::Outbound, holder, Arc::clone(&sidecar)).await;
        BombedRequester {
            sidecar,
            addr: proxy.local_addrs()[0],
            _proxy: proxy,
        }
    }
}

/// Row 5: 2000 messages of 49 bytes that restore to 1 MiB each (98 KB
/// that today become 2 GiB for TensorFlow). The answer restores at most
/// `max_tensor_bytes`, then fails with `RESOURCE_EXHAUSTED`: whole
/// messages only, never a truncated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_never_restores_beyond_the_cap() {
    const CAP: u64 = 8 * MIB;
    let _measuring = MEASURING.lock().await;
    let requester = BombedRequester::start(2000, 64 * MIB, CAP).await;
    let addr = requester.addr;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, http_body_util::Full<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::post(format!("http://{addr}{RUN_GRAPH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(one_message(b"run")))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert!(!response.headers().contains_key("grpc-encoding"));
    // Counted as it comes, never kept: today's code sends 2 GiB here.
    let mut body = response.into_body();
    let (mut received, mut pending, mut whole) = (0u64, BytesMut::new(), 0usize);
    let mut trailers = None;
    let mut failed = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(err) => {
                failed = Some(err.to_string());
                break;
            }
        };
        match frame.into_data() {
            Ok(data) => {
                received += data.len() as u64;
                pending.extend_from_slice(&data);
                // Whole messages are dropped as they complete.
                while pending.len() >= 5 {
                    let len = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]);
                    assert_eq!(pending[0], 0, "restored messages are plain");
                    if pending.len() < 5 + len as usize {
                        break;
                    }
                    let _ = pending.split_to(5 + len as usize);
                    whole += 1;
                }
                assert!(
                    received <= CAP + 2 * MIB,
                    "{received} bytes restored for one answer"
                );
            }
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    eprintln!(
        "answer: {received} bytes restored, {whole} whole messages, trailers {trailers:?}, error {failed:?}"
    );
    // The cap counts messages, not their 5-byte gRPC prefixes.
    let restored = received - 5 * whole as u64;
    assert!(restored <= CAP, "{restored} bytes restored");
    assert!(
        restored >= CAP / 2,
        "whole messages up to the cap: {restored}"
    );
    assert!(pending.is_empty(), "no truncated message");
    let trailers = trailers.expect("a clean gRPC status, not a reset");
    assert_eq!(trailers["grpc-status"], "8", "RESOURCE_EXHAUSTED");
    let hop = requester.sidecar.stats().totals().hop;
    assert_eq!(hop.refused.answer_too_large, 1, "{hop:?}");
    assert!(hop.restored.raw_bytes <= CAP);
}

/// Row 5: 64 answers of 6 restored MiB each that TensorFlow never reads
/// (today: 384 MB held outside the budget). Restored messages are charged
/// until written toward TensorFlow, so restoring waits for the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restored_answers_tensorflow_does_not_read_are_charged() {
    const BUDGET: u64 = 32 * MIB;
    let _measuring = MEASURING.lock().await;
    let requester = BombedRequester::start(6, BUDGET, 8 * MIB).await;
    let addr = requester.addr;
    reset_peak_rss();
    let before = peak_rss();
    let sender = never_reading_sender(addr).await;
    let mut calls = Vec::new();
    for _ in 0..64 {
        let request = Request::post(format!("http://{addr}{RUN_GRAPH}"))
            .header("content-type", "application/grpc")
            .body(http_body_util::Full::new(one_message(b"run")))
            .unwrap();
        let mut sender = sender.clone();
        calls.push(tokio::spawn(
            async move { sender.send_request(request).await },
        ));
    }
    let most = most_charged(&requester.sidecar, Duration::from_secs(3)).await;
    let grown = peak_rss().saturating_sub(before);
    let restored = requester.sidecar.stats().totals().hop.restored.raw_bytes;
    eprintln!(
        "unread answers: {} MiB restored, {} MiB charged at most, peak RSS grew {} MiB",
        restored >> 20,
        most >> 20,
        grown >> 20
    );
    assert!(most > 0, "restored messages are charged");
    assert!(most <= BUDGET);
    // The budget, the client's socket buffers, hyper's around them.
    assert!(grown < 160 * MIB, "peak RSS grew {} MiB", grown >> 20);
    drop(sender);
    calls.into_iter().for_each(|c| c.abort());
}

/// Row 7: 140k distinct small messages kept as references, then repeats.
/// Counted at their real size, they hold about the setting's bytes of
/// memory (today's "8 MiB" holds about 40 MB); taking one out again is
/// constant time (reported, not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_references_hold_what_their_setting_says() {
    use tlc_proxy::connection::ConnectionId;
    use tlc_sidecar::hop::references::{Held, Sent, SentKey};
    const BOUND: usize = 8 << 20;
    let _measuring = MEASURING.lock().await;
    let message =
        |i: u64| format!("/job:worker/replica:0/task:0;step {i:>12};edge_{i}").into_bytes();
    let before = rss();
    let held = Held::new(BOUND);
    for i in 0..140_000u64 {
        held.keep(ConnectionId(i % 4), &message(i));
    }
    for i in 0..140_000u64 {
        held.keep(ConnectionId(i % 4), &message(i % 1000));
    }
    let grown = rss().saturating_sub(before);
    let kept = (0..140_000u64)
        .filter(|&i| {
            let m = message(i);
            held.get(ConnectionId(i % 4), tlc_wire::hop::reference_id(&m))
                .is_some()
        })
        .count();
    eprintln!(
        "references: 140k distinct then repeats: {kept} kept, RSS grew {} KiB",
        grown >> 10
    );

    // The requester's side: 140k calls remembered, then the same call
    // remembered again, as every step does.
    let sent = Sent::new(BOUND);
    let addr: SocketAddr = "10.0.0.1:2222".parse().unwrap();
    for i in 0..140_000u64 {
        let path = format!("/x.Y/Method{i}");
        let m = message(i);
        sent.remember(SentKey::of(addr, &path, &m), Bytes::from(m));
    }
    let repeats = 2_000u32;
    let started = Instant::now();
    for i in 0..repeats {
        let path = format!("/x.Y/Method{}", 139_000 + i % 1000);
        let m = message(u64::from(i));
        let key = SentKey::of(addr, &path, &m);
        let _ = sent.get(&key);
        sent.remember(key, Bytes::from(m));
    }
    let each = started.elapsed() / repeats;
    eprintln!("references: a remembered call again takes {each:?} with 140k kept");
    assert!(kept > 1000);
    assert!(
        grown < 12 << 20,
        "RSS grew {} KiB for an 8 MiB bound",
        grown >> 10
    );
}
