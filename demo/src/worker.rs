//! A worker task: each step it pulls every variable from the parameter
//! task, computes the gradient of its next mini-batch, and holds it until
//! the parameter task asks for it. The chief (worker 0) pulls the final
//! model at the end and evaluates it: that is the model a real chief would
//! see, the one that came through the sidecars.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures_util::future::try_join_all;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::data::{Batches, Dataset, Examples};
use super::graph::Graph;
use super::model::{Evaluation, Mlp};
use super::ps::evaluate;
use super::wire::{self, code, Client, Handler, Status};

/// The gradients of one step, as the worker serves them.
#[derive(Debug)]
pub struct Gradients {
    /// The step; `-1` before the first.
    pub step: i64,
    /// Each variable's gradient as `tensor_content`.
    pub content: Vec<Bytes>,
}

/// Worker `index`'s `RecvTensor` service: answers the parameter task's
/// request for a gradient of step `s` once this worker has computed it.
pub fn handler(
    index: usize,
    graph: Arc<Graph>,
    gradients: watch::Receiver<Arc<Gradients>>,
    done: CancellationToken,
) -> Handler {
    Arc::new(move |request| {
        let (graph, mut gradients, done) = (graph.clone(), gradients.clone(), done.clone());
        Box::pin(async move {
            let var = graph
                .parse_push(index, &request.rendezvous_key)
                .map_err(|e| status(code::NOT_FOUND, &e.to_string()))?;
            let step = request.step_id;
            let ready = tokio::select! {
                ready = gradients.wait_for(|g| g.step >= step) => ready.map(|g| Arc::clone(&g)),
                () = done.cancelled() => return Err(status(code::ABORTED, "the job ended")),
            };
            let ready = ready.map_err(|_| status(code::ABORTED, "the worker stopped"))?;
            if ready.step != step {
                return Err(status(code::ABORTED, "that step's gradient is gone"));
            }
            Ok((
                graph.variables[var].dims.clone(),
                ready.content[var].clone(),
            ))
        })
    })
}

fn status(code: u16, message: &str) -> Status {
    Status {
        code,
        message: message.to_owned(),
    }
}

/// Everything a worker needs to train.
pub struct WorkerTask {
    /// Which worker.
    pub index: usize,
    /// The network.
    pub mlp: Mlp,
    /// Names and keys.
    pub graph: Arc<Graph>,
    /// Steps to run.
    pub steps: usize,
    /// Examples per mini-batch.
    pub batch: usize,
    /// The seed of the batch order.
    pub seed: u64,
    /// The client to the parameter task, through this pod's sidecar.
    pub ps: Client,
    /// Where this worker's gradients are published.
    pub gradients: watch::Sender<Arc<Gradients>>,
    /// The data (this worker trains on its shard).
    pub data: Arc<Dataset>,
}

/// What a worker saw.
#[derive(Debug, Clone)]
pub struct WorkerOutcome {
    /// The training loss of each step's mini-batch.
    pub train_loss: Vec<f64>,
    /// The chief only: the final model as received, and its test evaluation.
    pub last: Option<(Vec<Vec<f32>>, Evaluation)>,
    /// Bytes of variable values received (f32 content).
    pub tensor_bytes: u64,
}

impl WorkerTask {
    /// Runs every step; the chief then pulls and evaluates the final model.
    pub async fn run(self) -> Result<WorkerOutcome> {
        let shard = Arc::new(self.data.shard(self.index, self.graph.workers()));
        let mut batches = Batches::new(shard.len(), self.seed, 100 + self.index as u64);
        let mut train_loss = Vec::with_capacity(self.steps);
        let mut tensor_bytes = 0;
        // As TF's master does before the first step: the parameter task's
        // partition, through both sidecars, which learn each tensor's class.
        self.ps
            .register_graph(self.graph.ps_partition(self.index))
            .await
            .with_context(|| format!("worker {}: registering its graph", self.index))?;
        for step in 0..self.steps {
            let params = self.pull(step as i64).await?;
            tensor_bytes += params.iter().map(|p| 4 * p.len() as u64).sum::<u64>();
            let batch = batches.next_batch(self.batch);
            let (loss, grads) = gradients(&self.mlp, params, &shard, batch).await?;
            train_loss.push(loss);
            self.gradients.send_replace(Arc::new(Gradients {
                step: step as i64,
                content: grads.iter().map(|g| wire::content_of(g)).collect(),
            }));
        }
        let last = if self.index == 0 {
            let params = self.pull(self.steps as i64).await?;
            tensor_bytes += params.iter().map(|p| 4 * p.len() as u64).sum::<u64>();
            let evaluation = evaluate(&self.mlp, &params, &self.data).await?;
            Some((params, evaluation))
        } else {
            None
        };
        Ok(WorkerOutcome {
            train_loss,
            last,
            tensor_bytes,
        })
    }

    /// Every variable of `step`, pulled at once as TF's Recv ops do.
    async fn pull(&self, step: i64) -> Result<Vec<Vec<f32>>> {
        let calls = (0..self.graph.variables.len()).map(|v| async move {
            let key = self.graph.pull_key(self.index, v);
            let tensor =
                self.ps.recv_tensor(&key, step).await.with_context(|| {
                    format!("worker {} step {step}: variable {key}", self.index)
                })?;
            if tensor.dims != self.graph.variables[v].dims {
                bail!("variable {key} has shape {:?}", tensor.dims);
            }
            Ok(tensor.values)
        });
        try_join_all(calls).await
    }
}

/// One mini-batch's loss and gradients, off the async threads.
async fn gradients(
    mlp: &Mlp,
    params: Vec<Vec<f32>>,
    shard: &Arc<Examples>,
    batch: Vec<usize>,
) -> Result<(f64, Vec<Vec<f32>>)> {
    let (mlp, shard) = (mlp.clone(), shard.clone());
    tokio::task::spawn_blocking(move || mlp.gradients(&params, &shard, &batch))
        .await
        .context("gradient computation panicked")
}
