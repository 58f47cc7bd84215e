//! Ids that cross twice in a step (the lookup ids, then the gradient's
//! indices, a reshape of them) go the second time as a reference to the
//! first, which both sidecars hold; TensorFlow gets every value, and a
//! requester that no longer holds the first copy fetches the original.
//! The graph is real TensorFlow's: a TF1 asynchronous embedding job's
//! parameter-task partition.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use support::metrics::{key, pair};
use support::tf::{ids_body, request_body, start_raw_server};
use support::Client;
use tlc_wire::tf::ids::read_ids;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::recv_tensor;
use tlc_wire::tf::{grpc, RECV_TENSOR_PATH};

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";

fn registration() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../wire/tests/fixtures/graphs/tf1_embedding_async_1ps_w0.register_graph.pb"
    );
    std::fs::read(path).unwrap()
}

fn lookup_ids_key() -> String {
    key(WORKER, PS, 118, "_recv_ids_0")
}

fn gradient_indices_key() -> String {
    key(WORKER, PS, 29, "gradients/embedding_lookup_grad/Reshape_1")
}

/// The ids of a step: duplicates, and different each step.
fn ids(step: i64) -> Vec<i64> {
    (0..600).map(|i| (i * 7 + step * 13) % 450).collect()
}

/// The worker's answer: the step's ids as int64, whichever of the two
/// tensors is asked for.
fn answer(request: &RecvTensorRequest) -> Bytes {
    ids_body(&ids(request.step_id))
}

/// Asks for `key` at `step`; returns the ids TensorFlow would read.
async fn recv_ids(client: &Client, key: &str, step: i64) -> Vec<i64> {
    let reply = client
        .call(RECV_TENSOR_PATH, &[], request_body(key, step))
        .await;
    assert_eq!(reply.trailers["grpc-status"], "0", "{:?}", reply.headers);
    assert!(!reply.headers.contains_key("tlc-ids-again"));
    let message = grpc::parse_single(reply.body, usize::MAX).unwrap();
    let response = recv_tensor::decode_response(message).unwrap();
    read_ids(&response, 1 << 20).unwrap()
}

async fn taught_pair() -> support::metrics::Pair {
    let server = start_raw_server(Arc::new(answer)).await;
    let holder = Arc::new(support::compressing_sidecar());
    holder.learn_graph(&registration()).unwrap();
    let pair = pair(server, holder).await;
    pair.requester.learn_graph(&registration()).unwrap();
    pair
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gradients_indices_go_as_a_reference_to_the_lookup_ids() {
    let pair = taught_pair().await;
    for step in 1..=3 {
        assert_eq!(
            recv_ids(&pair.client, &lookup_ids_key(), step).await,
            ids(step)
        );
        assert_eq!(
            recv_ids(&pair.client, &gradient_indices_key(), step).await,
            ids(step)
        );
    }
    // Both at once, either may be served first: never each other's
    // reference, so both arrive.
    let (lookup, indices) = (lookup_ids_key(), gradient_indices_key());
    for step in 4..=8 {
        let (a, b) = tokio::join!(
            recv_ids(&pair.client, &lookup, step),
            recv_ids(&pair.client, &indices, step)
        );
        assert_eq!((a, b), (ids(step), ids(step)), "step {step}");
    }
    let sent = pair.holder.stats().totals().ids_again;
    assert!(sent.messages >= 3, "{sent:?}");
    assert!(sent.wire_bytes * 20 < sent.raw_bytes, "{sent:?}");
    let requester = pair.requester.stats().totals();
    assert_eq!((requester.decode_failures, requester.fallbacks), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requester_without_the_first_copy_gets_the_original() {
    let pair = taught_pair().await;
    assert_eq!(recv_ids(&pair.client, &lookup_ids_key(), 1).await, ids(1));
    // Another requester's sidecar (this one restarted, say) asks for the
    // indices of the same step: it never held the lookup ids.
    let inbound = support::proxy(
        tlc_core::Role::Inbound,
        start_raw_server(Arc::new(answer)).await,
        Arc::clone(&pair.holder),
    )
    .await;
    let fresh = Arc::new(support::compressing_sidecar());
    fresh.learn_graph(&registration()).unwrap();
    let outbound = support::proxy(
        tlc_core::Role::Outbound,
        inbound.local_addrs()[0],
        Arc::clone(&fresh),
    )
    .await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    assert_eq!(recv_ids(&client, &gradient_indices_key(), 1).await, ids(1));
    let totals = fresh.stats().totals();
    assert_eq!((totals.decode_failures, totals.fallbacks), (1, 1));
}
