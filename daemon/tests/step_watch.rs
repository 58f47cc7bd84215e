//! A global step that goes back to 0 mid-run (TensorFlow re-initialised
//! the model) fails the job with `FAILED_PRECONDITION` through the
//! sidecars, or passes unchanged with `recovery.on_model_reset = "warn"`.
//! The stand-in for TensorFlow answers with the captured int64 global step
//! read, its value patched.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prost::Message;
use support::metrics::pair;
use support::tf::{request_body, start_raw_server};
use support::{Client, Reply};
use tlc_core::Role;
use tlc_sidecar::training::recovery::{OnModelReset, RecoverySettings};
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::{grpc, RECV_TENSOR_PATH};

/// The captured response to `edge_17_global_step/read` (value 0).
const CAPTURED: &[u8] =
    include_bytes!("../../wire/tests/fixtures/captured/int64_global_step.response.grpc");

/// The key of the capture: worker 0 reads the global step from ps 0.
const KEY: &str = "/job:ps/replica:0/task:0/device:CPU:0;9535e5bbb9628c8e;\
                   /job:worker/replica:0/task:0/device:CPU:0;edge_17_global_step/read;0:0";

/// What the stand-in answers at each step: the model is re-initialised
/// after step 2.
const VALUES: [i64; 5] = [5, 6, 7, 0, 1];

/// The captured response holding `value`: its last eight bytes are the
/// tensor's content.
fn step_response(value: i64) -> Bytes {
    let mut body = CAPTURED.to_vec();
    let at = body.len() - 8;
    body[at..].copy_from_slice(&value.to_le_bytes());
    body.into()
}

/// The answer to `request`: the global step of `VALUES[step]`.
fn answer(request: &RecvTensorRequest) -> Bytes {
    let step = usize::try_from(request.step_id).unwrap_or(0);
    step_response(VALUES[step.min(VALUES.len() - 1)])
}

/// A stand-in TensorFlow ps behind a sidecar (it checks that no sidecar
/// header reaches it).
async fn start_ps() -> std::net::SocketAddr {
    start_raw_server(Arc::new(answer)).await
}

/// A stand-in TensorFlow ps with no sidecar next to it: it gets the
/// requester's sidecar headers, and ignores them as TensorFlow does.
async fn start_bare_ps() -> std::net::SocketAddr {
    support::serve(Arc::new(|request: Request<Incoming>| {
        Box::pin(async move {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let message = grpc::parse_single(body, 1 << 20).unwrap();
            let request = RecvTensorRequest::decode(message).unwrap();
            support::grpc_response(answer(&request), HeaderMap::new())
        })
    }))
    .await
}

async fn read(client: &Client, step: i64) -> Reply {
    client
        .call(RECV_TENSOR_PATH, &[], request_body(KEY, step))
        .await
}

fn warn() -> RecoverySettings {
    RecoverySettings {
        on_model_reset: OnModelReset::Warn,
        ..RecoverySettings::default()
    }
}

/// The reply is TensorFlow's response to step `step`, unchanged.
fn assert_unchanged(reply: &Reply, step: usize) {
    assert_eq!(reply.trailers["grpc-status"], "0", "{:?}", reply.headers);
    assert_eq!(reply.body, step_response(VALUES[step]), "step {step}");
}

/// The reply is the reset's `FAILED_PRECONDITION`.
fn assert_failed(reply: &Reply) {
    assert_eq!(reply.headers["grpc-status"], "9", "{:?}", reply.headers);
    assert!(reply.body.is_empty());
    let message = reply.headers["grpc-message"].to_str().unwrap();
    assert_eq!(
        message,
        "tlcd: TensorFlow re-initialised the model mid-run: global_step on /job:ps/task:0 went \
         back from 7 to 0 (a session was rebuilt after a broken connection and there is no \
         checkpoint to restore). tlcd fails the job rather than let it train again from scratch \
         silently; set recovery.on_model_reset = \"warn\" to let it continue."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_fails_the_job_through_a_pair_of_sidecars() {
    let ps = start_ps().await;
    let pair = pair(ps, Arc::new(support::compressing_sidecar())).await;
    for step in 0..3 {
        assert_unchanged(&read(&pair.client, step as i64).await, step);
    }
    // The holder's sidecar sees 0 first and fails the call; the
    // requester's passes that error on as it is.
    assert_failed(&read(&pair.client, 3).await);
    // Sticky: the next read fails too, whatever its value.
    assert_failed(&read(&pair.client, 4).await);
    let holder = pair.holder.training_view(std::time::Instant::now());
    assert_eq!((holder.resets_failed, holder.rewinds), (1, 0));
    let event = holder.last_reset.unwrap();
    assert_eq!((event.from, event.to), (7, 0));
    assert_eq!(event.holder, "/job:ps/replica:0/task:0");
    let requester = pair.requester.training_view(std::time::Instant::now());
    assert_eq!(requester.global_step, Some(7));
    assert_eq!(requester.resets, 0, "it only saw the holder's error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requester_side_alone_fails_a_reset() {
    // No sidecar next to the ps: the worker's sidecar sees the step go back.
    let ps = start_bare_ps().await;
    let sidecar = Arc::new(support::compressing_sidecar());
    let proxy = support::proxy(Role::Outbound, ps, sidecar.clone()).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;
    for step in 0..3 {
        assert_unchanged(&read(&client, step as i64).await, step);
    }
    assert_failed(&read(&client, 3).await);
    assert_failed(&read(&client, 4).await);
    let text = tlc_daemon::metrics::render(&sidecar).unwrap();
    assert!(
        text.contains("tlc_training_resets_total{action=\"failed\"} 1"),
        "{text}"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_warn_every_read_passes_unchanged() {
    let ps = start_ps().await;
    let holder = Arc::new(support::compressing_sidecar());
    holder.set_recovery(warn());
    let pair = pair(ps, holder).await;
    pair.requester.set_recovery(warn());
    for step in 0..VALUES.len() {
        assert_unchanged(&read(&pair.client, step as i64).await, step);
    }
    for sidecar in [&pair.holder, &pair.requester] {
        let view = sidecar.training_view(std::time::Instant::now());
        assert_eq!((view.resets, view.resets_warned), (1, 1));
        assert_eq!(view.global_step, Some(1));
        let text = tlc_daemon::metrics::render(sidecar).unwrap();
        assert!(
            text.contains("tlc_training_resets_total{action=\"warned\"} 1"),
            "{text}"
        );
        assert!(text.contains("tlc_training_global_step 1"), "{text}");
    }
}
