//! One run of the emulated job: start the pods, connect every task to its
//! sidecar, train, evaluate, gather what the tasks, sidecars and links
//! counted, and stop the pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use futures_util::future::try_join_all;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use tlc_context::replica_hash;
use tlc_core::TensorKey;

use super::data::Dataset;
use super::graph::{worker_task, Graph, PS_TASK};
use super::model::{Evaluation, Mlp, Sgd};
use super::options::{Compression, DemoOptions};
use super::pods::{Pods, PodsSpec};
use super::report::{DemoReport, RunReport, SidecarTotals};
use super::{ps, wire, worker};

/// Runs the job once: starts the pods, trains, evaluates, stops the pods.
pub async fn run_job(options: &DemoOptions, compression: Compression) -> Result<RunReport> {
    anyhow::ensure!(options.workers >= 1, "the job needs at least one worker");
    anyhow::ensure!(options.steps >= 1, "the job needs at least one step");
    let (job, ps_handler, worker_handlers) = Job::new(options);
    let spec = PodsSpec {
        workers: options.workers,
        policy: options.policy_for(compression),
        rate_mbit: options.rate_mbit,
        latency: options.latency,
    };
    let pods = Pods::start(&spec, ps_handler, worker_handlers).await?;
    let (mlp, graph, done) = (job.mlp.clone(), job.graph.clone(), job.done.clone());
    let result = job.train(options, &pods).await;
    done.cancel();
    let report = result.map(|outcome| report(options, compression, &mlp, &graph, &pods, outcome));
    pods.shutdown().await;
    report
}

/// The job's state before it starts: the model, the data, and the
/// channels on which the tasks publish what their servers answer with.
struct Job {
    mlp: Mlp,
    graph: Arc<Graph>,
    data: Arc<Dataset>,
    params: Vec<Vec<f32>>,
    /// Fired when the run ends, so that no call waits forever.
    done: CancellationToken,
    snapshots: watch::Sender<Arc<ps::Snapshot>>,
    gradients: Vec<watch::Sender<Arc<worker::Gradients>>>,
}

/// What the tasks returned.
struct Outcome {
    ps: ps::PsOutcome,
    workers: Vec<worker::WorkerOutcome>,
    seconds: f64,
}

impl Job {
    /// The job of `options`, with the parameter task's server handler and
    /// each worker's.
    fn new(options: &DemoOptions) -> (Job, wire::Handler, Vec<wire::Handler>) {
        let mlp = options.mlp();
        let graph = Arc::new(Graph::new(&mlp, options.workers, options.seed));
        let done = CancellationToken::new();
        let (snapshots, snapshot_rx) = watch::channel(Arc::new(ps::Snapshot {
            step: -1,
            content: Vec::new(),
        }));
        let ps_handler = ps::handler(graph.clone(), snapshot_rx, done.clone());
        let mut gradients = Vec::new();
        let mut worker_handlers = Vec::new();
        for i in 0..options.workers {
            let (tx, rx) = watch::channel(Arc::new(worker::Gradients {
                step: -1,
                content: Vec::new(),
            }));
            gradients.push(tx);
            worker_handlers.push(worker::handler(i, graph.clone(), rx, done.clone()));
        }
        let job = Job {
            params: mlp.init(options.seed),
            data: Arc::new(Dataset::generate(&options.data, options.seed)),
            mlp,
            graph,
            done,
            snapshots,
            gradients,
        };
        (job, ps_handler, worker_handlers)
    }

    /// Connects every task to its sidecar and runs them to the end.
    async fn train(self, options: &DemoOptions, pods: &Pods) -> Result<Outcome> {
        let ps_clients =
            try_join_all(pods.ps.peers.iter().map(|&a| wire::Client::connect(a))).await?;
        let ps_task = ps::ParameterTask {
            mlp: self.mlp.clone(),
            graph: self.graph.clone(),
            sgd: Sgd::new(options.lr, options.momentum, &self.params),
            params: self.params,
            steps: options.steps,
            workers: ps_clients,
            snapshots: self.snapshots,
            data: self.data.clone(),
        };
        let mut workers = Vec::new();
        for (index, (pod, gradients)) in pods.workers.iter().zip(self.gradients).enumerate() {
            workers.push(worker::WorkerTask {
                index,
                mlp: self.mlp.clone(),
                graph: self.graph.clone(),
                steps: options.steps,
                batch: options.batch,
                seed: options.seed,
                ps: wire::Client::connect(pod.peers[0]).await?,
                gradients,
                data: self.data.clone(),
            });
        }
        let started = Instant::now();
        let (ps, workers) = tokio::try_join!(
            ps_task.run(),
            try_join_all(workers.into_iter().map(worker::WorkerTask::run))
        )?;
        Ok(Outcome {
            ps,
            workers,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Puts together what the tasks, the sidecars and the links saw.
fn report(
    options: &DemoOptions,
    compression: Compression,
    mlp: &Mlp,
    graph: &Graph,
    pods: &Pods,
    outcome: Outcome,
) -> RunReport {
    let steps = options.steps;
    let train_loss = (0..steps)
        .map(|s| {
            let losses: Vec<f64> = outcome
                .workers
                .iter()
                .filter_map(|w| w.train_loss.get(s).copied())
                .collect();
            losses.iter().sum::<f64>() / losses.len().max(1) as f64
        })
        .collect();
    let (chief_params, chief_eval) = outcome.workers[0]
        .last
        .clone()
        .unwrap_or_else(|| (Vec::new(), Evaluation::default()));
    let (replicas_checked, replica_mismatches) =
        check_replicas(graph, pods, &outcome.ps.params, &chief_params);
    let tensor_bytes =
        outcome.ps.tensor_bytes + outcome.workers.iter().map(|w| w.tensor_bytes).sum::<u64>();
    RunReport {
        label: options.label_for(compression),
        compression,
        parameters: mlp.parameter_count(),
        step_seconds: outcome.ps.step_seconds,
        seconds: outcome.seconds,
        train_loss,
        initial: outcome.ps.initial,
        ps_eval: outcome.ps.last,
        chief_eval,
        tensor_bytes,
        sidecars: sidecar_totals(pods),
        link_bytes: pods.link_bytes(),
        ps_link_bytes: (pods.ps.nic.up.bytes(), pods.ps.nic.down.bytes()),
        replicas_checked,
        replica_mismatches,
    }
}

/// Compares, per variable, what the chief received with the parameter
/// side sidecar's replica and the chief's sidecar's replica (compressed
/// tensors), or with the exact value (tensors passed as they are).
/// Returns (variables checked, mismatches).
fn check_replicas(
    graph: &Graph,
    pods: &Pods,
    ps_params: &[Vec<f32>],
    chief_params: &[Vec<f32>],
) -> (usize, usize) {
    let mut mismatches = 0;
    for (v, var) in graph.variables.iter().enumerate() {
        let Some(received) = chief_params.get(v) else {
            mismatches += 1;
            continue;
        };
        let source_key = TensorKey {
            holder: PS_TASK.into(),
            requester: String::new(),
            tensor: var.read_node.clone(),
        };
        let holder = pods
            .ps
            .sidecar
            .inspect_pull_source(&source_key, |source| source.replica_hash());
        let agree = match holder {
            Some(holder) => {
                let key = TensorKey {
                    holder: PS_TASK.into(),
                    requester: worker_task(0),
                    tensor: var.read_node.clone(),
                };
                let chief = pods.workers[0].sidecar.replica_hash(&key);
                replica_hash(received) == holder && chief == Some(holder)
            }
            None => Some(received) == ps_params.get(v),
        };
        mismatches += usize::from(!agree);
    }
    (graph.variables.len(), mismatches)
}

/// Every sidecar's counters, added up.
fn sidecar_totals(pods: &Pods) -> SidecarTotals {
    let mut totals = SidecarTotals::default();
    let mut passed = BTreeMap::new();
    for sidecar in pods.sidecars() {
        let s = sidecar.stats().totals();
        totals.compressed += s.push.tensors + s.pull.tensors;
        totals.push_raw += s.push.raw_bytes;
        totals.push_wire += s.push.wire_bytes;
        totals.pull_raw += s.pull.raw_bytes;
        totals.pull_wire += s.pull.wire_bytes;
        totals.restored += s.restored;
        totals.decode_failures += s.decode_failures;
        totals.fallbacks += s.fallbacks;
        for (reason, n) in s.passed {
            *passed.entry(reason.to_owned()).or_insert(0) += n;
        }
    }
    totals.passed = passed;
    totals
}

/// Runs the job uncompressed, then with 3LC, over the same links.
pub async fn run_demo(options: &DemoOptions) -> Result<DemoReport> {
    let baseline = run_job(options, Compression::None)
        .await
        .context("the uncompressed run failed")?;
    let tlc = run_job(
        options,
        Compression::ThreeLc {
            sparsity: options.sparsity,
        },
    )
    .await
    .context("the 3LC run failed")?;
    Ok(DemoReport {
        options: options.clone(),
        baseline,
        tlc,
    })
}
