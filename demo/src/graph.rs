//! What TensorFlow's graphs would call things in the emulated job: task and
//! device names, the nodes that send variables and gradients, the edge ids
//! of each worker's graph, and the rendezvous keys built from them.
//!
//! In between-graph replication each worker builds its own graph, which is
//! partitioned between the worker and the parameter task; the Send/Recv
//! pairs get names `edge_<id>_<node>` with ids from that worker's graph. So
//! the same variable has different edge ids on different workers, as it
//! does with real TensorFlow.

use tlc_wire::graph::build::PartitionBuilder;
use tlc_wire::tf::rendezvous::{FrameIter, RendezvousKey};

use super::data::Rng;
use super::model::Mlp;

/// The parameter task.
pub const PS_TASK: &str = "/job:ps/replica:0/task:0";

/// A task's CPU device.
pub fn device(task: &str) -> String {
    format!("{task}/device:CPU:0")
}

/// Worker `index`'s task name.
pub fn worker_task(index: usize) -> String {
    format!("/job:worker/replica:0/task:{index}")
}

/// The rendezvous key of tensor `node` sent from task `src` (in its
/// `incarnation`) to task `dst` on edge `edge`, as TensorFlow writes it.
fn key(src: &str, incarnation: u64, dst: &str, edge: usize, node: &str) -> String {
    RendezvousKey {
        src_device: device(src),
        src_incarnation: incarnation,
        dst_device: device(dst),
        tensor_name: format!("edge_{edge}_{node}"),
        frame_iter: FrameIter::default(),
    }
    .to_string()
}

/// One trainable variable and the names its tensors travel under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The variable, e.g. `dense_1/kernel`.
    pub name: String,
    /// Its shape.
    pub dims: Vec<u64>,
    /// The node that sends its value to workers: `dense_1/kernel/read`.
    pub read_node: String,
    /// The node that sends its gradient to the parameter task:
    /// `gradients/dense_1/MatMul_grad/MatMul_1`.
    pub gradient_node: String,
}

/// Names and keys of one job: its variables, workers and incarnations.
#[derive(Debug, Clone)]
pub struct Graph {
    /// The variables, in the model's parameter order.
    pub variables: Vec<Variable>,
    workers: usize,
    /// Incarnation of the parameter task, then of each worker.
    incarnations: Vec<u64>,
}

/// A rendezvous key that does not name a tensor of this job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rendezvous key {key:?} does not name a tensor this task sends: {problem}")]
pub struct UnknownTensor {
    /// The key as received.
    pub key: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl Graph {
    /// The names for `mlp` trained by `workers` workers; incarnations come
    /// from `seed`.
    pub fn new(mlp: &Mlp, workers: usize, seed: u64) -> Graph {
        let shapes = mlp.shapes();
        let variables = shapes
            .into_iter()
            .enumerate()
            .map(|(i, dims)| {
                let layer = Mlp::layer_name(i / 2);
                let (var, grad) = if i % 2 == 0 {
                    ("kernel", "MatMul_grad/MatMul_1")
                } else {
                    ("bias", "BiasAdd_grad/BiasAddGrad")
                };
                Variable {
                    name: format!("{layer}/{var}"),
                    dims,
                    read_node: format!("{layer}/{var}/read"),
                    gradient_node: format!("gradients/{layer}/{grad}"),
                }
            })
            .collect();
        let mut rng = Rng::new(seed, 7);
        Graph {
            variables,
            workers,
            incarnations: (0..=workers).map(|_| rng.next_u64()).collect(),
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Edge id of variable `var`'s value in worker `worker`'s graph.
    fn pull_edge(&self, worker: usize, var: usize) -> usize {
        5 + 3 * var + worker
    }

    /// Edge id of variable `var`'s gradient in worker `worker`'s graph.
    fn push_edge(&self, worker: usize, var: usize) -> usize {
        40 + 7 * var + 2 * worker
    }

    /// The key under which worker `worker` asks the parameter task for
    /// variable `var`.
    pub fn pull_key(&self, worker: usize, var: usize) -> String {
        let (edge, incarnation) = (self.pull_edge(worker, var), self.incarnations[0]);
        let node = &self.variables[var].read_node;
        key(PS_TASK, incarnation, &worker_task(worker), edge, node)
    }

    /// The key under which the parameter task asks worker `worker` for the
    /// gradient of variable `var`.
    pub fn push_key(&self, worker: usize, var: usize) -> String {
        let (edge, incarnation) = (self.push_edge(worker, var), self.incarnations[worker + 1]);
        let node = &self.variables[var].gradient_node;
        key(&worker_task(worker), incarnation, PS_TASK, edge, node)
    }

    /// The parameter task's partition of worker `worker`'s graph, as that
    /// worker's master registers it (a serialized `RegisterGraphRequest`):
    /// each variable read and sent, each gradient received and applied.
    pub fn ps_partition(&self, worker: usize) -> Vec<u8> {
        let worker_task = worker_task(worker);
        let mut partition = PartitionBuilder::new(PS_TASK);
        for (v, var) in self.variables.iter().enumerate() {
            let pull = format!("edge_{}_{}", self.pull_edge(worker, v), var.read_node);
            let push = format!("edge_{}_{}", self.push_edge(worker, v), var.gradient_node);
            partition = partition
                .dense_read(&var.name, &pull, &worker_task)
                .accumulated_gradient(&var.name, &push, &worker_task);
        }
        partition.register_graph_request()
    }

    /// Which variable a worker asks the parameter task for with `key`.
    pub fn parse_pull(&self, key: &str) -> Result<usize, UnknownTensor> {
        (0..self.workers)
            .flat_map(|w| (0..self.variables.len()).map(move |v| (w, v)))
            .find(|&(w, v)| self.pull_key(w, v) == key)
            .map(|(_, v)| v)
            .ok_or_else(|| unknown(key, "not a variable of the parameter task"))
    }

    /// Which gradient the parameter task asks worker `worker` for with `key`.
    pub fn parse_push(&self, worker: usize, key: &str) -> Result<usize, UnknownTensor> {
        (0..self.variables.len())
            .find(|&v| self.push_key(worker, v) == key)
            .ok_or_else(|| unknown(key, "not a gradient of this worker"))
    }
}

fn unknown(key: &str, problem: &'static str) -> UnknownTensor {
    UnknownTensor {
        key: key.to_owned(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_look_like_tensorflow_and_parse_back() {
        let graph = Graph::new(&Mlp::new(vec![64, 1024, 512, 10]), 2, 0);
        let key = graph.pull_key(1, 2);
        let parsed = RendezvousKey::parse(&key).unwrap();
        assert_eq!(parsed.src_device, "/job:ps/replica:0/task:0/device:CPU:0");
        assert_eq!(
            parsed.dst_device,
            "/job:worker/replica:0/task:1/device:CPU:0"
        );
        assert_eq!(parsed.context_name(), "dense_1/kernel/read");
        assert!(key.ends_with(";0:0"));
        assert_eq!(key.split(';').nth(1).map(str::len), Some(16));
        // The same variable has another edge id on the other worker.
        assert_ne!(graph.pull_key(0, 2), key);
        assert_eq!(
            RendezvousKey::parse(&graph.pull_key(0, 2))
                .unwrap()
                .context_name(),
            "dense_1/kernel/read"
        );
        assert_eq!(graph.parse_pull(&key), Ok(2));
        let push = graph.push_key(0, 3);
        assert_eq!(
            RendezvousKey::parse(&push).unwrap().context_name(),
            "gradients/dense_1/BiasAdd_grad/BiasAddGrad"
        );
        assert_eq!(graph.parse_push(0, &push), Ok(3));
        assert!(graph.parse_push(1, &push).is_err());
        assert!(graph.parse_pull(&push).is_err());
    }
}
