//! Graph registrations from a hostile peer: what a `RegisterGraph`
//! message's prefix declares is never reserved, what the tap holds is
//! charged to the in-flight budget and let go of after
//! `limits.gather_seconds`, and the call itself reaches TensorFlow as it
//! was sent, byte for byte and without waiting.

mod support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{grpc_response, proxy, serve};
use tlc_core::Role;
use tlc_sidecar::graph::tap::REGISTER_GRAPH;
use tlc_sidecar::sidecar::Options;
use tlc_sidecar::Sidecar;
use tokio::net::TcpStream;

/// A request body that sends its chunks and then stays open, as a peer
/// that declared more than it sends.
struct Hanging(Vec<Bytes>);

impl Body for Hanging {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.0.is_empty() {
            return Poll::Pending;
        }
        Poll::Ready(Some(Ok(Frame::data(self.0.remove(0)))))
    }
}

/// A gRPC prefix declaring a message of `len` bytes.
fn prefix(len: u32) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&len.to_be_bytes());
    out
}

/// A stand-in TensorFlow that counts the registration bytes it receives
/// as they come and answers once a body ends.
async fn counting_tf(received: Arc<AtomicU64>) -> std::net::SocketAddr {
    serve(Arc::new(move |request: Request<Incoming>| {
        let received = received.clone();
        Box::pin(async move {
            let mut body = request.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    received.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            grpc_response(Bytes::from_static(&[0, 0, 0, 0, 0]), Default::default())
        })
    }))
    .await
}

/// Opens one connection to `addr` and starts a `RegisterGraph` call on
/// it for each of `bodies`; the calls stay open.
async fn register(addr: std::net::SocketAddr, bodies: Vec<Vec<Bytes>>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Hanging>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(connection);
    for chunks in bodies {
        let request = Request::post(format!("http://{addr}{REGISTER_GRAPH}"))
            .header("content-type", "application/grpc")
            .body(Hanging(chunks))
            .unwrap();
        let mut sender = sender.clone();
        tokio::spawn(async move {
            let _ = sender.send_request(request).await;
        });
    }
}

/// This process's virtual and resident memory, bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    (field("VmSize:"), field("VmRSS:"))
}

fn graph_unread(sidecar: &Sidecar) -> u64 {
    let totals = sidecar.stats().totals();
    totals.passed.get("graph_unread").copied().unwrap_or(0)
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 150 streams each declare a 250 MiB registration and send six bytes of
/// it. Before: each reserved 250 MiB (37.5 GB of virtual memory for
/// these; 72k streams reached 18 TB). Now: what arrived, charged to the
/// in-flight budget, and let go of (counted) once `gather` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_declaring_250_mib_hold_what_arrived_for_a_while() {
    const STREAMS: u64 = 150;
    let received = Arc::new(AtomicU64::new(0));
    let tf = counting_tf(received.clone()).await;
    let options = Options {
        gather: Duration::from_secs(2),
        ..Options::default()
    };
    let sidecar = support::compressing_sidecar_with(options);
    let inbound = proxy(Role::Inbound, tf, sidecar.clone()).await;
    let (virtual_before, resident_before) = memory();
    let body = [prefix(250 << 20), b"abcdef".to_vec()].concat();
    let bodies = (0..STREAMS)
        .map(|_| vec![Bytes::from(body.clone())])
        .collect();
    register(inbound.local_addrs()[0], bodies).await;
    // Every byte reaches TensorFlow now, though no message is complete.
    until("the bytes reach TensorFlow", || {
        received.load(Ordering::Relaxed) == STREAMS * 11
    })
    .await;
    let (virtual_now, resident_now) = memory();
    let grown = virtual_now.saturating_sub(virtual_before);
    assert!(grown < 1 << 30, "virtual memory grew {} MiB", grown >> 20);
    let resident = resident_now.saturating_sub(resident_before);
    assert!(resident < 256 << 20, "resident grew {} MiB", resident >> 20);
    // What the taps hold is charged (a KiB each, the budget's unit).
    let charged = sidecar.in_flight().in_use_bytes;
    assert!(charged >= STREAMS * 1024, "{charged}");
    assert_eq!(graph_unread(&sidecar), 0);
    // After gather_seconds the taps let go, and say so.
    until("the taps give up", || graph_unread(&sidecar) == STREAMS).await;
    until("their charges come back", || {
        sidecar.in_flight().in_use_bytes == 0
    })
    .await;
}

/// A registration growing past the in-flight budget is given up on (its
/// bytes let go of, counted) while the call goes on to TensorFlow byte for
/// byte; a registration after it is read as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_past_the_budget_is_not_read_but_still_forwarded() {
    let received = Arc::new(AtomicU64::new(0));
    let tf = counting_tf(received.clone()).await;
    let options = Options {
        in_flight_bytes: 256 << 10,
        ..Options::default()
    };
    let sidecar = support::compressing_sidecar_with(options);
    let inbound = proxy(Role::Inbound, tf, sidecar.clone()).await;
    let mut chunks = vec![Bytes::from(prefix(250 << 20))];
    chunks.extend((0..64).map(|_| Bytes::from(vec![7u8; 16 << 10])));
    register(inbound.local_addrs()[0], vec![chunks]).await;
    let sent = 5 + 64 * (16 << 10);
    until("the bytes reach TensorFlow", || {
        received.load(Ordering::Relaxed) == sent
    })
    .await;
    until("the tap gives up", || graph_unread(&sidecar) == 1).await;
    assert_eq!(sidecar.in_flight().in_use_bytes, 0);
    // A whole registration after it: learned.
    let client = support::Client::connect(inbound.local_addrs()[0]).await;
    let partition = tlc_wire::graph::build::PartitionBuilder::new("/job:ps/replica:0/task:0")
        .dense_gradient("w", "edge_5_w/grad", "/job:worker/replica:0/task:0");
    support::register_graph(&client, partition).await;
    let learned = sidecar.graph_class(
        "/job:worker/replica:0/task:0",
        "/job:ps/replica:0/task:0",
        "edge_5_w/grad",
    );
    assert!(learned.is_some());
}
