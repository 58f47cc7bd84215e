//! Rows envelopes (kinds 4 and 5) from a hostile peer whose ids are not
//! the ids of the step: against a registered graph (a real TF1 embedding
//! job's), the requester's sidecar holds the step's ids, and the peer's
//! envelope is for other ids (another set of the same count, or another
//! count). TensorFlow never gets rows restored onto the wrong ids: the
//! decode fails (`tlc_decode_failures_total`), the original is fetched,
//! and TensorFlow gets exactly that.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderMap, Request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prost::Message;
use support::metrics::key;
use support::tf::{envelope_body, ids_body, recv, response_body};
use support::{grpc_response, proxy, serve, Client};
use tlc_codec::{Codec, Sparsity};
use tlc_context::{RowErrors, RowMirror, Uniques};
use tlc_core::Role;
use tlc_wire::peer;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::{grpc, RECV_TENSOR_PATH};

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
/// Values per row.
const DIM: usize = 8;

fn registration() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wire/tests/fixtures/graphs/tf1_embedding_async_1ps_w0.register_graph.pb"
    );
    std::fs::read(path).unwrap()
}

/// The step's ids: duplicates, and different each step.
fn ids(step: i64) -> Vec<i64> {
    (0..600).map(|i| (i * 7 + step * 13) % 450).collect()
}

/// A row per id position.
fn rows(step: i64) -> Vec<f32> {
    (0..600 * DIM)
        .map(|i| ((i as f32 * 0.11 + step as f32).sin()) * 0.5)
        .collect()
}

/// Which rows envelope the hostile holder sends, for which ids.
#[derive(Clone, Copy)]
enum Hostile {
    /// Gathered rows (kind 4) for other ids of the same count.
    PullOther,
    /// Gathered rows (kind 4) for fewer ids.
    PullFewer,
    /// Gradient rows (kind 5) for other ids of the same count.
    PushOther,
    /// Gradient rows (kind 5) for fewer ids.
    PushFewer,
}

impl Hostile {
    fn pull(self) -> bool {
        matches!(self, Hostile::PullOther | Hostile::PullFewer)
    }

    /// The ids the envelope is for, at `step` (whose own are `ids(step)`).
    fn ids(self, step: i64) -> Vec<i64> {
        match self {
            Hostile::PullOther | Hostile::PushOther => ids(step + 1),
            Hostile::PullFewer | Hostile::PushFewer => ids(step)[..300].to_vec(),
        }
    }

    /// The envelope of `step`'s rows for [`Hostile::ids`], as a holder's
    /// sidecar would encode them.
    fn envelope(self, step: i64, token: u64) -> Vec<u8> {
        let ids = self.ids(step);
        let values = &rows(step)[..ids.len() * DIM];
        let three_lc = Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        };
        let mut uniques = Uniques::new();
        let mut out = Vec::new();
        if self.pull() {
            RowMirror::new(1, DIM, 1024)
                .encode(
                    &ids,
                    values,
                    &Codec::None,
                    &three_lc,
                    token,
                    &mut uniques,
                    &mut out,
                )
                .unwrap();
        } else {
            RowErrors::new(DIM, 1024)
                .encode(&ids, values, &three_lc, token, &mut uniques, &mut out)
                .unwrap();
        }
        out
    }
}

/// The ids tensor and the rows tensor of the kind (the graph pairs them).
fn keys(hostile: Hostile) -> (String, String) {
    if hostile.pull() {
        (
            key(WORKER, PS, 118, "_recv_ids_0"),
            key(PS, WORKER, 15, "embedding_lookup"),
        )
    } else {
        (
            key(WORKER, PS, 29, "gradients/embedding_lookup_grad/Reshape_1"),
            key(WORKER, PS, 82, "gradients/embedding_lookup_grad/Reshape"),
        )
    }
}

/// A hostile holder's sidecar: the step's ids as they are, the rows as a
/// rows envelope for other ids, and the original rows when asked for the
/// fallback (counted in `fallbacks`).
async fn hostile_holder(hostile: Hostile, fallbacks: Arc<AtomicU64>) -> std::net::SocketAddr {
    serve(Arc::new(move |request: Request<Incoming>| {
        let fallbacks = fallbacks.clone();
        Box::pin(async move {
            if request.uri().path() == peer::FALLBACK_PATH {
                fallbacks.fetch_add(1, Ordering::Relaxed);
                let token = request.headers()[peer::FALLBACK].to_str().unwrap();
                let step = u64::from_str_radix(token, 16).unwrap() as i64 - 1000;
                let body = response_body(&[600, DIM as u64], &rows(step));
                return grpc_response(body, HeaderMap::new());
            }
            assert_eq!(request.uri().path(), RECV_TENSOR_PATH);
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let call =
                RecvTensorRequest::decode(grpc::parse_single(body, 1 << 20).unwrap()).unwrap();
            let step = call.step_id;
            if call.rendezvous_key == keys(hostile).0 {
                return grpc_response(ids_body(&ids(step)), HeaderMap::new());
            }
            assert_eq!(call.rendezvous_key, keys(hostile).1);
            let token = 1000 + step as u64;
            let envelope = hostile.envelope(step, token);
            let body = envelope_body(&[600, DIM as u64], envelope);
            let mut response = grpc_response(body, HeaderMap::new());
            response
                .headers_mut()
                .insert(peer::ENVELOPE, peer::PROTOCOL.parse().unwrap());
            response
        })
    }))
    .await
}

/// Three steps of `hostile` through a requester's sidecar that learned
/// the job's graph: TensorFlow gets the original rows every time, each
/// failed decode is counted and its original fetched.
async fn never_restored_onto_other_ids(hostile: Hostile) {
    let fallbacks = Arc::new(AtomicU64::new(0));
    let holder = hostile_holder(hostile, fallbacks.clone()).await;
    let requester = Arc::new(support::compressing_sidecar());
    requester.learn_graph(&registration()).unwrap();
    let outbound = proxy(Role::Outbound, holder, requester.clone()).await;
    let tf = Client::connect(outbound.local_addrs()[0]).await;
    let (ids_key, rows_key) = keys(hostile);
    for step in 1..=3 {
        // The step's ids cross first, and the sidecar keeps them.
        let reply = tf
            .call(
                RECV_TENSOR_PATH,
                &[],
                support::tf::request_body(&ids_key, step),
            )
            .await;
        assert_eq!(reply.trailers["grpc-status"], "0");
        let got = recv(&tf, &rows_key, step).await;
        assert!(
            got.values == rows(step),
            "step {step}: not the original rows"
        );
    }
    assert_eq!(requester.stats().totals().decode_failures, 3);
    assert_eq!(fallbacks.load(Ordering::Relaxed), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_rows_for_other_ids_are_never_restored() {
    never_restored_onto_other_ids(Hostile::PullOther).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_rows_for_fewer_ids_are_never_restored() {
    never_restored_onto_other_ids(Hostile::PullFewer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gradient_rows_for_other_ids_are_never_restored() {
    never_restored_onto_other_ids(Hostile::PushOther).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gradient_rows_for_fewer_ids_are_never_restored() {
    never_restored_onto_other_ids(Hostile::PushFewer).await;
}
