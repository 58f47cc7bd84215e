//! Tensors get the treatment their class allows: a graph passing through
//! the sidecars teaches both of them what each tensor is; gathered rows
//! and sparse gradients cross without memory (no replica, no error
//! feedback); dense tensors warm up uncompressed when asked; and one
//! sidecar carrying several requesting tasks keeps their replicas apart.

mod support;

use std::sync::Arc;

use support::metrics::{holder_with, key, pair, Pair};
use support::register_graph;
use support::tf::{recv, start_tensor_server, Tensors};
use tlc_core::TensorClass;
use tlc_sidecar::policy::PolicySettings;
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;

const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const W1: &str = "/job:worker/replica:0/task:1/device:CPU:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";
const W0_TASK: &str = "/job:worker/replica:0/task:0";
const W1_TASK: &str = "/job:worker/replica:0/task:1";
const N: usize = 32_000;

/// Rows of a table: different rows (values) every step.
fn rows(step: i64) -> Vec<f32> {
    (0..N)
        .map(|i| ((i as f32 * 0.37 + step as f32 * 11.0).sin()) * 0.05)
        .collect()
}

/// A model value that moves a little each step.
fn model(step: i64) -> Vec<f32> {
    (0..N)
        .map(|i| (i as f32 * 0.01).cos() + step as f32 * 1e-3)
        .collect()
}

fn server_tensors() -> Tensors {
    Arc::new(|key: &str, step: i64| {
        if key.contains("embedding_lookup") {
            (vec![1000, 32], rows(step))
        } else {
            (vec![N as u64], model(step))
        }
    })
}

fn partition() -> PartitionBuilder {
    PartitionBuilder::new(PS_TASK)
        .gathered_rows("emb", "edge_4_emb/embedding_lookup", W0_TASK)
        .dense_read("w", "edge_5_w/read", W0_TASK)
        .dense_read("w", "edge_6_w/read", W1_TASK)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_on_the_wire_teaches_both_sidecars_and_rows_cross_without_memory() {
    let server = start_tensor_server(server_tensors()).await;
    let path = pair(server, Arc::new(support::compressing_sidecar())).await;
    register_graph(&path.client, partition()).await;
    for sidecar in [&path.requester, &path.holder] {
        let learned = sidecar
            .graph_class(PS_TASK, W0_TASK, "edge_4_emb/embedding_lookup")
            .expect("the graph was read on its way");
        assert_eq!(learned.class, TensorClass::Sparse);
        assert!(learned.reason.contains("GatherV2"), "{}", learned.reason);
    }
    let rows_key = key(PS, W0, 4, "emb/embedding_lookup");
    for step in 0..5 {
        let got = recv(&path.client, &rows_key, step).await;
        // Each step's rows on their own: fp16 of exactly these rows, not a
        // replica updated with deltas from other rows.
        for (sent, got) in rows(step).iter().zip(&got.values) {
            assert!((sent - got).abs() <= sent.abs() * 2f32.powi(-11) + 1e-7);
        }
    }
    assert_eq!(path.holder.stats().totals().pull.tensors, 5);
    assert_eq!(path.holder.table_sizes().pull.contexts, 0, "no pull source");
    assert_eq!(path.requester.table_sizes().replicas.contexts, 0);
    assert_eq!(path.requester.stats().totals().decode_failures, 0);

    let listing = path.holder.tensors();
    let row = listing
        .iter()
        .find(|r| r.tensor == "emb/embedding_lookup")
        .expect("a row for the stateless tensor");
    assert_eq!(row.class.as_deref(), Some("sparse"));
    assert_eq!(row.treatment.as_deref(), Some("stateless"));
    assert_eq!(row.codec.codec, "fp16");
    assert_eq!(row.frames, 5);
    // fp16, with the entropy stage where it shrinks the frame further.
    assert!(row.ratio > 1.9, "{}", row.ratio);
    assert!(row
        .reason
        .as_deref()
        .unwrap_or("")
        .contains("gathered by GatherV2"));
}

/// A holder whose policy warms dense tensors up for `steps` with `codec`.
fn warming_holder(steps: u32, codec: &str) -> Arc<Sidecar> {
    let settings = PolicySettings {
        warmup_steps: steps,
        warmup_codec: codec.into(),
        ..support::compressing_settings()
    };
    holder_with(&settings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_tensors_warm_up_uncompressed_then_use_their_replica() {
    let server = start_tensor_server(server_tensors()).await;
    let holder = warming_holder(3, "none");
    let path = pair(server, holder.clone()).await;
    register_graph(&path.client, partition()).await;
    let w_key = key(PS, W0, 5, "w/read");
    for step in 0..6 {
        let got = recv(&path.client, &w_key, step).await;
        if step < 3 {
            assert_eq!(got.values, model(step), "warm-up step {step}: exact");
        }
    }
    let totals = holder.stats().totals();
    assert_eq!(totals.passed.get("warmup"), Some(&3));
    assert_eq!(totals.pull.tensors, 3);
    assert_eq!(holder.table_sizes().pull.contexts, 1);
    // The rows were never warmed up: not dense.
    let rows_key = key(PS, W0, 4, "emb/embedding_lookup");
    recv(&path.client, &rows_key, 0).await;
    assert_eq!(holder.stats().totals().pull.tensors, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_int8_warm_up_goes_through_the_replica_that_3lc_carries_on() {
    let server = start_tensor_server(server_tensors()).await;
    let holder = warming_holder(3, "int8");
    let path = pair(server, holder.clone()).await;
    register_graph(&path.client, partition()).await;
    let w_key = key(PS, W0, 5, "w/read");
    for step in 0..6 {
        let got = recv(&path.client, &w_key, step).await;
        let sent = model(step);
        let drift = tlc_context::pull::drift(&sent, &got.values);
        // int8 deltas, then 3LC's within the pull bound: never the exact
        // value after the first keyframe, never far from it.
        assert!(drift <= 0.01, "step {step}: drift {drift}");
        if step == 1 {
            assert_ne!(got.values, sent, "a delta through int8, not the value");
        }
    }
    let totals = holder.stats().totals();
    assert_eq!(totals.passed.get("warmup"), None, "nothing passed as it is");
    assert_eq!(totals.pull.tensors, 6);
    let codecs: Vec<_> = holder
        .tensors()
        .into_iter()
        .map(|t| t.codec.codec)
        .collect();
    assert_eq!(codecs, ["3lc"], "3LC once the warm-up is over");
    assert_eq!(
        holder.table_sizes().pull.contexts,
        1,
        "one replica throughout"
    );
}

/// A pair whose holder knows a training partition and an evaluation's
/// (reads only) for worker 0, with `exact_reads` as given; the training
/// read's key and the evaluation's.
async fn training_and_evaluation(exact_reads: bool) -> (Pair, Arc<Sidecar>, String, String) {
    let server = start_tensor_server(server_tensors()).await;
    let settings = PolicySettings {
        exact_reads,
        ..support::compressing_settings()
    };
    let holder = holder_with(&settings);
    let path = pair(server, holder.clone()).await;
    register_graph(&path.client, partition()).await;
    // The chief's evaluation: the ps's partition only reads and sends.
    let evaluation = PartitionBuilder::new(PS_TASK).dense_read("w", "edge_9_w/read", W0_TASK);
    register_graph(&path.client, evaluation).await;
    let training = key(PS, W0, 5, "w/read");
    let evaluated = key(PS, W0, 9, "w/read");
    (path, holder, training, evaluated)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_reads_the_replica_where_exact_reads_are_off() {
    let (path, _, training, evaluated) = training_and_evaluation(false).await;
    for step in 0..3 {
        recv(&path.client, &training, step).await;
        let got = recv(&path.client, &evaluated, step).await;
        if step > 0 {
            assert_ne!(got.values, model(step), "step {step}: the replica");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_reads_the_model_exact_between_training_steps() {
    let (path, holder, training, evaluated) = training_and_evaluation(true).await;
    for step in 0..4 {
        let got = recv(&path.client, &training, step).await;
        if step > 0 {
            assert_ne!(
                got.values,
                model(step),
                "step {step}: training reads a replica"
            );
        }
        let got = recv(&path.client, &evaluated, step).await;
        assert_eq!(
            got.values,
            model(step),
            "step {step}: the evaluation reads the model"
        );
    }
    // Through the replica both times: the evaluation's reads are lossless
    // deltas that settle it, the training reads 3LC deltas from there.
    let totals = holder.stats().totals();
    assert_eq!(totals.pull.tensors, 8);
    assert!(totals.passed.is_empty(), "{:?}", totals.passed);
    assert_eq!(holder.table_sizes().pull.contexts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sidecar_carrying_two_requesters_keeps_their_replicas_apart() {
    // TF2's coordinator routes both workers' pulls through its own sidecar.
    let server = start_tensor_server(server_tensors()).await;
    let path = pair(server, Arc::new(support::compressing_sidecar())).await;
    register_graph(&path.client, partition()).await;
    // The workers pull at their own pace: worker 1 lags by one step.
    for step in 0..8i64 {
        let a = recv(&path.client, &key(PS, W0, 5, "w/read"), step).await;
        let b = recv(&path.client, &key(PS, W1, 6, "w/read"), (step - 1).max(0)).await;
        for (got, truth) in [(a, model(step)), (b, model((step - 1).max(0)))] {
            let err = got
                .values
                .iter()
                .zip(&truth)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(err < 0.05, "step {step}: error {err}");
        }
    }
    let totals = path.requester.stats().totals();
    assert_eq!(totals.decode_failures, 0);
    assert_eq!(totals.fallbacks, 0);
    assert_eq!(path.requester.table_sizes().replicas.contexts, 2);
    // One shared source on the holder: one encode serves both.
    assert_eq!(path.holder.table_sizes().pull.contexts, 1);
    for requester in [W0_TASK, W1_TASK] {
        let key = tlc_core::TensorKey {
            holder: PS_TASK.into(),
            requester: requester.into(),
            tensor: "w/read".into(),
        };
        assert!(path.requester.replica_hash(&key).is_some());
    }
}
