//! Sidecar headers from a hostile peer or task: none reaches TensorFlow
//! (every `tlc-*` name, made-up ones included, in headers and trailers,
//! both ways), and what one connection reports of its link (`tlc-link`)
//! moves no other requester's decision.

mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use support::metrics::key;
use support::tf::{request_body, response_body, start_tensor_server, Tensors};
use support::{grpc_response, proxy, serve, Client};
use tlc_core::Role;
use tlc_sidecar::policy::{LinkMode, LinkSettings, Policy, PolicySettings};
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;
use tlc_wire::peer;
use tlc_wire::tf::RECV_TENSOR_PATH;

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const WORKER_TASK: &str = "/job:worker/replica:0/task:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";
const STATUS: &str = "/tensorflow.WorkerService/GetStatus";

/// Every sidecar header a hostile peer might send (not those that change
/// the call's course: a hop reference, an envelope, ids by reference),
/// and names no sidecar writes.
fn hostile() -> Vec<(&'static str, &'static str)> {
    let skip = [peer::HOP_REF, peer::ENVELOPE, peer::IDS_AGAIN];
    let mut headers: Vec<(&str, &str)> = peer::ALL
        .into_iter()
        .filter(|name| !skip.contains(name))
        .map(|name| (name, "1"))
        .collect();
    headers.extend([("tlc-made-up", "x"), ("tlc-hop-miss", "1")]);
    headers
}

fn sidecar_names(headers: &HeaderMap) -> Vec<String> {
    headers
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("tlc-"))
        .collect()
}

/// A stand-in TensorFlow (or peer) that keeps the headers of every call
/// and answers `headers`/`trailers` around a small float tensor.
async fn recording(
    seen: Arc<Mutex<Vec<(String, HeaderMap)>>>,
    headers: HeaderMap,
    trailers: HeaderMap,
) -> std::net::SocketAddr {
    serve(Arc::new(move |request: Request<Incoming>| {
        let seen = seen.clone();
        let (headers, trailers) = (headers.clone(), trailers.clone());
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            seen.lock().unwrap().push((path, request.headers().clone()));
            let _ = request.into_body().collect().await;
            let mut response = grpc_response(response_body(&[4], &[1.0; 4]), trailers);
            response.headers_mut().extend(headers);
            response
        })
    }))
    .await
}

fn header_map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
        .collect()
}

/// The holder's side: a peer's calls reach TensorFlow without any
/// `tlc-*` header, whether the sidecar reads the call (a `RecvTensor`
/// from a peer), passes it (one without `tlc-peer`) or forwards it (any
/// other method, a graph registration). Before: the last three reached
/// TensorFlow with every header the peer sent, the first with
/// `tlc-made-up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tlc_header_a_peer_sends_reaches_tensorflow() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tf = recording(seen.clone(), HeaderMap::new(), HeaderMap::new()).await;
    let holder = Arc::new(support::compressing_sidecar());
    let inbound = proxy(Role::Inbound, tf, holder).await;
    let client = Client::connect(inbound.local_addrs()[0]).await;
    let grad = key(WORKER, PS, 5, "layer/grad");
    let all = hostile();
    let without_peer: Vec<_> = all
        .iter()
        .copied()
        .filter(|(k, _)| *k != peer::PEER)
        .collect();
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let calls: [(&str, Headers, Bytes); 4] = [
        (RECV_TENSOR_PATH, &all, request_body(&grad, 1)),
        (RECV_TENSOR_PATH, &without_peer, request_body(&grad, 2)),
        (STATUS, &all, Bytes::from_static(&[0, 0, 0, 0, 0])),
        (
            tlc_sidecar::graph::tap::REGISTER_GRAPH,
            &all,
            Bytes::from_static(&[0, 0, 0, 0, 0]),
        ),
    ];
    for (path, headers, body) in calls {
        let reply = client.call(path, headers, body).await;
        assert_eq!(reply.trailers["grpc-status"], "0", "{path}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "every call reached TensorFlow");
    let leaked: Vec<(&str, Vec<String>)> = seen
        .iter()
        .map(|(path, headers)| (path.as_str(), sidecar_names(headers)))
        .filter(|(_, names)| !names.is_empty())
        .collect();
    assert!(leaked.is_empty(), "reached TensorFlow: {leaked:?}");
}

/// The requester's side: a hostile peer's answer hands TensorFlow no
/// `tlc-*` header, in headers or trailers, and TensorFlow's own `tlc-*`
/// headers do not reach the peer. Before: `tlc-hop-miss`, `tlc-made-up`
/// and the rest reached TensorFlow (only `tlc-hop` and `tlc-hop-paths`
/// were stripped, and no trailer), and TensorFlow's `tlc-fallback` and
/// made-up headers reached the peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tlc_header_a_peer_answers_reaches_tensorflow() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut trailers = header_map(&hostile());
    trailers.insert("tlc-in-trailers", "1".parse().unwrap());
    let holder = recording(seen.clone(), header_map(&hostile()), trailers).await;
    let requester = Arc::new(support::compressing_sidecar());
    let outbound = proxy(Role::Outbound, holder, requester).await;
    let tf = Client::connect(outbound.local_addrs()[0]).await;
    let grad = key(WORKER, PS, 5, "layer/grad");
    let from_tf = [
        ("tlc-from-tf", "1"),
        (peer::FALLBACK, "ff"),
        (peer::ACK, "1"),
    ];
    let mut leaked = Vec::new();
    for (path, body) in [
        (RECV_TENSOR_PATH, request_body(&grad, 1)),
        (STATUS, Bytes::from_static(&[0, 0, 0, 0, 0])),
    ] {
        let reply = tf.call(path, &from_tf, body).await;
        assert_eq!(reply.trailers["grpc-status"], "0", "{path}");
        leaked.push((path, "headers", sidecar_names(&reply.headers)));
        leaked.push((path, "trailers", sidecar_names(&reply.trailers)));
    }
    leaked.retain(|(_, _, names)| !names.is_empty());
    assert!(leaked.is_empty(), "reached TensorFlow: {leaked:?}");
    let seen = seen.lock().unwrap();
    // Besides the two calls, the requester asked the holder for a session
    // (refused: the holder is no sidecar).
    let calls: Vec<_> = seen
        .iter()
        .filter(|(path, _)| path != tlc_proxy::mux::frame::PATH)
        .collect();
    assert_eq!(calls.len(), 2);
    for (path, headers) in calls {
        for (name, _) in from_tf {
            assert!(
                !headers.contains_key(name),
                "{path}: {name} from TensorFlow"
            );
        }
    }
}

/// Values of `n` elements that change every step.
fn values(n: usize, step: i64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.37 + step as f32 * 1.3).sin()) * 0.01)
        .collect()
}

/// One fake requester's `RecvTensor` of `key` at `step`, reporting
/// `link`; whether the answer came compressed.
async fn compressed(client: &Client, key: &str, step: i64, link: &str) -> bool {
    let headers = [(peer::PEER, "1"), (peer::LINK, link)];
    let reply = client
        .call(RECV_TENSOR_PATH, &headers, request_body(key, step))
        .await;
    assert_eq!(reply.trailers["grpc-status"], "0");
    peer::has_envelope(&reply.headers)
}

/// Two connections name the same requester task: one reports a link a
/// million times faster than any, to make the holder send that
/// requester's tensors raw. The other's decision stays its own: its link,
/// between break-even and the margin, keeps it compressed. Before: the
/// hostile connection flipped the requester's group to raw and the other
/// connection's next call crossed raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connections_link_does_not_move_another_requesters_decision() {
    const N: usize = 64 << 10;
    let settings = PolicySettings {
        link: LinkSettings {
            mode: LinkMode::Auto,
            assume_rate_mbit: 0,
            ..LinkSettings::default()
        },
        ..PolicySettings::default()
    };
    let holder = Arc::new(Sidecar::new(
        Policy::new(&settings).unwrap(),
        Default::default(),
        None,
    ));
    let tensors: Tensors = Arc::new(|_key: &str, step: i64| (vec![N as u64], values(N, step)));
    let tf = start_tensor_server(tensors).await;
    let inbound = proxy(Role::Inbound, tf, holder.clone()).await;
    support::teach(
        &holder,
        PartitionBuilder::new(PS_TASK).dense_gradient("layer", "edge_5_layer/grad", WORKER_TASK),
    );
    let grad = key(WORKER, PS, 5, "layer/grad");
    let victim = Client::connect(inbound.local_addrs()[0]).await;
    let hostile = Client::connect(inbound.local_addrs()[0]).await;
    // The victim decodes slowly (1 us a byte): its break-even is set by
    // that, and by what compressing saves, not by timing here.
    let slow = "1000-1000000";
    assert!(compressed(&victim, &grad, 0, slow).await, "costs unknown");
    assert!(compressed(&victim, &grad, 1, slow).await);
    let rows = holder.tensors();
    let row = rows.iter().find(|r| r.side == "holder").unwrap();
    let break_even = row.break_even_rate.unwrap();
    assert!(break_even > 1e5 && break_even < 1e7, "{break_even}");
    // The hostile connection, naming the same requester task.
    for step in 2..4 {
        compressed(&hostile, &grad, step, "1000000000000000000-1").await;
    }
    // Between break-even and 3x (the margin): the group's last state
    // decides, and the victim's own group never passed.
    let between = format!("{}-1000000", (break_even * 1.7) as u64);
    for step in 4..7 {
        assert!(
            compressed(&victim, &grad, step, &between).await,
            "step {step}: the victim's tensor crossed raw"
        );
    }
}
