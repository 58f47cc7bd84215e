//! The emulated TensorFlow job of `tlc-demo`, small: it trains through two
//! sidecars per path, once uncompressed and once with 3LC, and what the
//! sidecars, the links and the tasks report agrees.

use std::sync::Arc;
use std::time::Duration;

use tlc_demo::data::DataSpec;
use tlc_demo::graph::Graph;
use tlc_demo::model::Mlp;
use tlc_demo::wire::{Client, Server, WireError};
use tlc_demo::{ps, run_demo, DemoOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A model and data set small enough for a debug build, with a size
/// threshold low enough that the kernels are compressed.
fn tiny() -> DemoOptions {
    DemoOptions {
        workers: 2,
        steps: 5,
        rate_mbit: Some(200.0),
        latency: Duration::from_millis(1),
        hidden: 64,
        batch: 32,
        data: DataSpec {
            train: 1024,
            test: 400,
            ..DataSpec::default()
        },
        min_bytes: 1024,
        ..DemoOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_runs_train_and_3lc_moves_far_fewer_bytes() {
    let report = run_demo(&tiny()).await.expect("the demo runs");
    for run in [&report.baseline, &report.tlc] {
        assert_eq!(run.step_seconds.len(), 5, "{}", run.label);
        assert!(
            run.ps_eval.loss < run.initial.loss,
            "{}: test loss {} -> {}",
            run.label,
            run.initial.loss,
            run.ps_eval.loss
        );
        assert!(
            run.train_loss[4] < run.train_loss[0],
            "{}: {:?}",
            run.label,
            run.train_loss
        );
        assert_eq!(run.replicas_checked, 6);
        assert_eq!(
            run.replica_mismatches, 0,
            "{}: worker 0 got what the replicas hold",
            run.label
        );
        assert_eq!(run.sidecars.decode_failures, 0, "{}", run.label);
        assert_eq!(run.sidecars.fallbacks, 0, "{}", run.label);
        // The link carries the payload and a little framing.
        assert!(run.link_bytes >= run.payload_bytes(), "{}", run.label);
        assert!(run.tensor_bytes > 0);
    }
    let (base, tlc) = (&report.baseline, &report.tlc);
    // Same seed, same data, same batches: the same job.
    assert_eq!(base.initial, tlc.initial);
    assert_eq!(base.tensor_bytes, tlc.tensor_bytes);
    // Uncompressed: the chief sees exactly the parameter task's model.
    assert_eq!(base.ps_eval, base.chief_eval);
    assert_eq!(base.sidecars.compressed, 0);
    assert_eq!(base.payload_bytes(), base.tensor_bytes);

    let s = &tlc.sidecars;
    assert!(s.compressed > 0);
    assert_eq!(s.restored, s.compressed, "every envelope restored");
    // Five steps from a fresh model: the bound against the recent
    // gradient peak sends a second frame on most of them (9x here).
    assert!(
        s.push_wire * 5 < s.push_raw,
        "gradients: {} -> {} bytes",
        s.push_raw,
        s.push_wire
    );
    assert!(
        tlc.link_bytes * 2 < base.link_bytes,
        "link bytes {} vs {}",
        tlc.link_bytes,
        base.link_bytes
    );
    let json = report.json();
    for key in [
        "raw_bytes",
        "wire_bytes",
        "ratio",
        "step_seconds_baseline",
        "step_seconds_tlc",
        "accuracy_baseline",
        "accuracy_tlc",
        "loss_baseline",
        "loss_tlc",
        "steps",
        "rate_mbit",
        "speedup",
    ] {
        assert!(json.get(key).is_some(), "JSON lacks {key}");
    }
    assert!(report.table().contains("mean step time"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameter_task_answers_like_tensorflow() {
    let mlp = Mlp::new(vec![4, 6, 3, 2]);
    let graph = Arc::new(Graph::new(&mlp, 2, 0));
    let params = mlp.init(0);
    let (snapshots, rx) = watch::channel(Arc::new(ps::Snapshot {
        step: -1,
        content: Vec::new(),
    }));
    let done = CancellationToken::new();
    let server = Server::start(ps::handler(graph.clone(), rx, done.clone()))
        .await
        .unwrap();
    let client = Client::connect(server.addr()).await.unwrap();

    // A pull for step 0 waits until the variables of step 0 exist.
    let key = graph.pull_key(1, 2);
    let pending = {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move { client.recv_tensor(&key, 0).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pending.is_finished(), "answered before the step existed");
    snapshots.send_replace(Arc::new(ps::Snapshot {
        step: 0,
        content: params
            .iter()
            .map(|p| tlc_demo::wire::content_of(p))
            .collect(),
    }));
    let tensor = pending.await.unwrap().unwrap();
    assert_eq!(tensor.dims, vec![6, 3]);
    assert_eq!(tensor.values, params[2]);

    // A key that names no variable of this task: NOT_FOUND, as a gRPC status.
    match client.recv_tensor(&graph.push_key(0, 0), 0).await {
        Err(WireError::Status { code, .. }) => assert_eq!(code, "5"),
        other => panic!("expected NOT_FOUND, got {other:?}"),
    }
    // A call still waiting when the job ends is aborted, not left hanging.
    let waiting = {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move { client.recv_tensor(&key, 1).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    done.cancel();
    match waiting.await.unwrap() {
        Err(WireError::Status { code, .. }) => assert_eq!(code, "10"),
        other => panic!("expected ABORTED, got {other:?}"),
    }
    server.shutdown().await;
}
