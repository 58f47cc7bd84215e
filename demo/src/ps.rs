//! The parameter task: holds the model, serves each variable to the workers
//! that ask for it, collects every worker's gradients by asking each worker
//! for them, averages them and applies SGD — one synchronous step at a time.
//!
//! As in TensorFlow, the requests go the way the tensors are needed: a
//! worker calls `RecvTensor` on this task for a variable (a pull), and this
//! task calls `RecvTensor` on each worker for a gradient (a push). A pull
//! for step `s` is answered once the variables of step `s` exist.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures_util::future::try_join_all;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::data::Dataset;
use super::graph::Graph;
use super::model::{Evaluation, Mlp, Sgd};
use super::wire::{self, code, Client, Handler, Status};

/// The variables of one step, as the parameter task serves them.
#[derive(Debug)]
pub struct Snapshot {
    /// The step these values start; `-1` before training.
    pub step: i64,
    /// Each variable's `tensor_content`.
    pub content: Vec<Bytes>,
}

impl Snapshot {
    fn of(step: i64, params: &[Vec<f32>]) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            step,
            content: params.iter().map(|p| wire::content_of(p)).collect(),
        })
    }
}

/// The parameter task's `RecvTensor` service: answers a worker's pull of
/// a variable for step `s` once the variables of step `s` are published on
/// `snapshots`. Calls still waiting when `done` fires are aborted.
pub fn handler(
    graph: Arc<Graph>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    done: CancellationToken,
) -> Handler {
    Arc::new(move |request| {
        let (graph, mut snapshots, done) = (graph.clone(), snapshots.clone(), done.clone());
        Box::pin(async move {
            let var = graph
                .parse_pull(&request.rendezvous_key)
                .map_err(|e| Status {
                    code: code::NOT_FOUND,
                    message: e.to_string(),
                })?;
            let step = request.step_id;
            let snapshot = tokio::select! {
                ready = snapshots.wait_for(|s| s.step >= step) => ready.map(|s| Arc::clone(&s)),
                () = done.cancelled() => return Err(aborted("the job ended")),
            };
            let snapshot = snapshot.map_err(|_| aborted("the parameter task stopped"))?;
            if snapshot.step != step {
                return Err(aborted("step already applied"));
            }
            Ok((
                graph.variables[var].dims.clone(),
                snapshot.content[var].clone(),
            ))
        })
    })
}

fn aborted(message: &str) -> Status {
    Status {
        code: code::ABORTED,
        message: message.to_owned(),
    }
}

/// Everything the parameter task needs to train.
pub struct ParameterTask {
    /// The network.
    pub mlp: Mlp,
    /// Names and keys.
    pub graph: Arc<Graph>,
    /// The initial parameters.
    pub params: Vec<Vec<f32>>,
    /// The optimizer.
    pub sgd: Sgd,
    /// Steps to run.
    pub steps: usize,
    /// One client per worker, through this pod's sidecar.
    pub workers: Vec<Client>,
    /// Where the variables of each step are published.
    pub snapshots: watch::Sender<Arc<Snapshot>>,
    /// The data (the parameter task evaluates on the test set).
    pub data: Arc<Dataset>,
}

/// What the parameter task saw.
#[derive(Debug, Clone)]
pub struct PsOutcome {
    /// Test loss and accuracy of the initial model.
    pub initial: Evaluation,
    /// Test loss and accuracy of the final model, exactly as held here.
    pub last: Evaluation,
    /// The final parameters.
    pub params: Vec<Vec<f32>>,
    /// Seconds of each step, from publishing its variables to publishing the next.
    pub step_seconds: Vec<f64>,
    /// Bytes of gradient values received (f32 content).
    pub tensor_bytes: u64,
}

impl ParameterTask {
    /// Runs every step, then publishes the final variables (for the chief's
    /// evaluation) and evaluates them.
    pub async fn run(self) -> Result<PsOutcome> {
        let ParameterTask {
            mlp,
            graph,
            mut params,
            mut sgd,
            steps,
            workers,
            snapshots,
            data,
        } = self;
        let initial = evaluate(&mlp, &params, &data).await?;
        let mut step_seconds = Vec::with_capacity(steps);
        let mut tensor_bytes = 0u64;
        for step in 0..steps {
            let started = Instant::now();
            snapshots.send_replace(Snapshot::of(step as i64, &params));
            let calls = workers.iter().enumerate().flat_map(|(w, client)| {
                let graph = &graph;
                (0..graph.variables.len()).map(move |v| async move {
                    let key = graph.push_key(w, v);
                    let tensor = client
                        .recv_tensor(&key, step as i64)
                        .await
                        .with_context(|| format!("step {step}: gradient {key}"))?;
                    if tensor.dims != graph.variables[v].dims {
                        bail!("step {step}: gradient {key} has shape {:?}", tensor.dims);
                    }
                    Ok(tensor.values)
                })
            });
            let grads = try_join_all(calls).await?;
            tensor_bytes += grads.iter().map(|g| 4 * g.len() as u64).sum::<u64>();
            let average = average(&grads, workers.len(), graph.variables.len());
            sgd.apply(&mut params, &average);
            step_seconds.push(started.elapsed().as_secs_f64());
        }
        snapshots.send_replace(Snapshot::of(steps as i64, &params));
        let last = evaluate(&mlp, &params, &data).await?;
        Ok(PsOutcome {
            initial,
            last,
            params,
            step_seconds,
            tensor_bytes,
        })
    }
}

/// The mean of each variable's gradient over the workers; `grads` holds
/// worker 0's variables, then worker 1's, ….
fn average(grads: &[Vec<f32>], workers: usize, variables: usize) -> Vec<Vec<f32>> {
    let scale = 1.0 / workers.max(1) as f32;
    (0..variables)
        .map(|v| {
            let mut sum = grads[v].clone();
            for w in 1..workers {
                sum.iter_mut()
                    .zip(&grads[w * variables + v])
                    .for_each(|(s, g)| *s += g);
            }
            sum.iter_mut().for_each(|s| *s *= scale);
            sum
        })
        .collect()
}

/// Test loss and accuracy of `params`, off the async threads.
pub async fn evaluate(mlp: &Mlp, params: &[Vec<f32>], data: &Arc<Dataset>) -> Result<Evaluation> {
    let (mlp, params, data) = (mlp.clone(), params.to_vec(), data.clone());
    tokio::task::spawn_blocking(move || mlp.evaluate(&params, &data.test))
        .await
        .context("evaluation panicked")
}
