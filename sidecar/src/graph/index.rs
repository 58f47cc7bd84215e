//! What this sidecar has learned from the graphs and functions that
//! passed through it: the class of every tensor they send between tasks,
//! looked up by the rendezvous names that `RecvTensor` requests carry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use prost::Message;
use tracing::{debug, warn};

use super::classify::{adaptive_tasks, classify_body, Classified, RendezvousTensor, TensorClass};
use super::training::{Training, TrainingLedger};
use tlc_wire::graph::proto::{
    EnqueueRequest, FunctionDef, FunctionDefLibrary, RegisterGraphRequest,
};

/// Why a registration message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// Not the protobuf it should be.
    #[error("cannot decode {what}: {source}")]
    Decode {
        /// Which message.
        what: &'static str,
        /// prost's error.
        source: prost::DecodeError,
    },
}

/// What one message taught the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Learned {
    /// Graphs and function bodies read.
    pub bodies: usize,
    /// Cross-task tensors classified.
    pub tensors: usize,
    /// Tensors that two bodies classified differently: now `unknown`.
    pub conflicts: usize,
    /// Tensors not stored because the index is full.
    pub dropped: usize,
}

/// Counters of the index, for metrics and the admin API.
#[derive(Debug, Default)]
pub struct IndexCounters {
    /// Registration messages read.
    pub messages: AtomicU64,
    /// Registration messages that could not be read (passed on regardless).
    pub unreadable: AtomicU64,
    /// Tensors not stored because the index was full.
    pub dropped: AtomicU64,
    /// Tensors found with two different classes.
    pub conflicts: AtomicU64,
}

/// The class of every cross-task tensor seen in a graph, bounded in size.
#[derive(Debug)]
pub struct GraphIndex {
    tensors: Mutex<HashMap<RendezvousTensor, Classified>>,
    max_entries: usize,
    training: TrainingLedger,
    /// What happened so far.
    pub counters: IndexCounters,
}

impl Default for GraphIndex {
    fn default() -> Self {
        GraphIndex::new(DEFAULT_MAX_ENTRIES)
    }
}

/// Entries kept by default: a ResNet-110 with 10 workers sends about 7,000
/// tensors across tasks; each entry is a few hundred bytes.
pub const DEFAULT_MAX_ENTRIES: usize = 200_000;

impl GraphIndex {
    /// An empty index holding at most `max_entries` tensors.
    pub fn new(max_entries: usize) -> GraphIndex {
        GraphIndex {
            tensors: Mutex::new(HashMap::new()),
            max_entries,
            training: TrainingLedger::default(),
            counters: IndexCounters::default(),
        }
    }

    /// The class of a tensor named by a rendezvous key, if a graph said.
    pub fn lookup(&self, src_task: &str, dst_task: &str, tensor_name: &str) -> Option<Classified> {
        let key = RendezvousTensor {
            src_task: src_task.to_owned(),
            dst_task: dst_task.to_owned(),
            tensor_name: tensor_name.to_owned(),
        };
        let mut known = self.lock().get(&key).cloned()?;
        if known.class == TensorClass::DenseGradient
            && !known.adaptive
            && self.training.adaptive(dst_task)
        {
            known.mark_adaptive("the task applies an adaptive optimizer");
        }
        Some(known)
    }

    /// How `task`'s variables are updated, from the dense gradients the
    /// graphs show it receiving.
    pub fn training(&self, task: &str) -> Training {
        self.training.training(task)
    }

    /// Number of tensors known.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no tensor is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many known tensors are in each class.
    pub fn class_counts(&self) -> [(TensorClass, usize); 4] {
        let map = self.lock();
        TensorClass::ALL.map(|class| (class, map.values().filter(|c| c.class == class).count()))
    }

    /// Learns from one `RegisterGraphRequest` (the protobuf, without the
    /// gRPC prefix).
    pub fn learn_register_graph(&self, message: &[u8]) -> Result<Learned, GraphError> {
        let request = self.decode::<RegisterGraphRequest>(message, "RegisterGraphRequest")?;
        let mut learned = Learned::default();
        if let Some(graph) = &request.graph_def {
            self.learn_body(&graph.node, None, &mut learned);
            self.learn_library(graph.library.as_ref(), &mut learned);
        }
        Ok(self.finish("RegisterGraph", learned))
    }

    /// Learns from one `EnqueueRequest` (TF2: function registrations queued
    /// on a remote task, including multi-device functions' components).
    pub fn learn_enqueue(&self, message: &[u8]) -> Result<Learned, GraphError> {
        let request = self.decode::<EnqueueRequest>(message, "EnqueueRequest")?;
        let mut learned = Learned::default();
        for item in &request.queue {
            let Some(register) = &item.register_function else {
                continue;
            };
            if let Some(function) = &register.function_def {
                self.learn_function(function, &mut learned);
            }
            self.learn_library(register.library.as_ref(), &mut learned);
        }
        Ok(self.finish("Enqueue", learned))
    }

    fn decode<M: Message + Default>(
        &self,
        message: &[u8],
        what: &'static str,
    ) -> Result<M, GraphError> {
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        M::decode(message).map_err(|source| {
            self.counters.unreadable.fetch_add(1, Ordering::Relaxed);
            GraphError::Decode { what, source }
        })
    }

    fn finish(&self, what: &str, learned: Learned) -> Learned {
        if learned.conflicts > 0 {
            warn!(
                call = what,
                conflicts = learned.conflicts,
                "tensors classified differently by two graphs are now treated as unknown"
            );
        }
        if learned.dropped > 0 {
            warn!(
                call = what,
                dropped = learned.dropped,
                max = self.max_entries,
                "graph index full: new tensors stay unknown"
            );
        }
        debug!(call = what, ?learned, "read a graph registration");
        learned
    }

    fn learn_library(&self, library: Option<&FunctionDefLibrary>, learned: &mut Learned) {
        for function in library.map(|l| l.function.as_slice()).unwrap_or_default() {
            self.learn_function(function, learned);
        }
    }

    fn learn_function(&self, function: &FunctionDef, learned: &mut Learned) {
        let name = function.signature.as_ref().map_or("", |s| s.name.as_str());
        self.learn_body(&function.node_def, Some(name), learned);
    }

    fn learn_body(
        &self,
        nodes: &[tlc_wire::graph::proto::NodeDef],
        function: Option<&str>,
        learned: &mut Learned,
    ) {
        learned.bodies += 1;
        for task in adaptive_tasks(nodes) {
            self.training.saw_adaptive(&task);
        }
        let found = classify_body(nodes, function);
        if found.is_empty() {
            return;
        }
        for (tensor, classified) in &found {
            if classified.class == TensorClass::DenseGradient {
                self.training
                    .saw_gradient(&tensor.dst_task, !classified.accumulated);
            }
        }
        let mut map = self.lock();
        for (tensor, classified) in found {
            learned.tensors += 1;
            let len = map.len();
            match map.get_mut(&tensor) {
                Some(existing) if existing.class == TensorClass::Unknown => {}
                Some(existing)
                    if existing.class != classified.class
                        || existing.function != classified.function =>
                {
                    // Two graphs disagree on one name, or two functions use
                    // it (TF2 functions reuse edge names): the only safe
                    // answer is "unknown".
                    learned.conflicts += 1;
                    self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    *existing = Classified::plain(
                        TensorClass::Unknown,
                        format!(
                            "graphs disagree: {} / {}",
                            existing.reason, classified.reason
                        ),
                        classified.output,
                    );
                }
                // One graph accumulates a gradient, another applies it on
                // arrival: refine it (more passes are never less safe).
                // Row ids are trusted only when every graph names the
                // same ones.
                Some(existing) => {
                    existing.accumulated &= classified.accumulated;
                    // Adaptive if any graph says so (the codec it gets is
                    // the more careful one).
                    existing.adaptive |= classified.adaptive;
                    // Exact only while every graph that names it reads only.
                    existing.read_only &= classified.read_only;
                    if existing.rows != classified.rows {
                        existing.rows = None;
                    }
                }
                None if len >= self.max_entries => {
                    learned.dropped += 1;
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    map.insert(tensor, classified);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RendezvousTensor, Classified>> {
        self.tensors.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tlc_wire::graph::proto::{
        AttrValue, EnqueueRequest, NodeDef, OpDef, QueueItem, RegisterFunctionOp,
    };

    const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";

    fn node(name: &str, op: &str, input: &[&str], attrs: &[(&str, &str)]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: input.iter().map(|s| s.to_string()).collect(),
            device: String::new(),
            attr: attrs
                .iter()
                .map(|(k, v)| {
                    let value = AttrValue {
                        s: Some(v.as_bytes().to_vec()),
                        r#type: None,
                        ..Default::default()
                    };
                    (k.to_string(), value)
                })
                .collect(),
        }
    }

    /// A TF2 ps component sending a variable read as `edge_60_...`.
    fn component(function: &str, read_input: &str) -> Vec<u8> {
        let send = [
            ("tensor_name", "edge_60_MatMul/ReadVariableOp"),
            ("send_device", PS),
            ("recv_device", W0),
        ];
        let body = vec![
            node(
                "MatMul/ReadVariableOp",
                "ReadVariableOp",
                &[read_input],
                &[],
            ),
            node("send", "_Send", &["MatMul/ReadVariableOp:value:0"], &send),
        ];
        EnqueueRequest {
            context_id: 7,
            queue: vec![QueueItem {
                register_function: Some(RegisterFunctionOp {
                    function_def: Some(FunctionDef {
                        signature: Some(OpDef {
                            name: function.into(),
                        }),
                        node_def: body,
                    }),
                    is_component_function: true,
                    library: None,
                }),
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn functions_name_contexts_by_the_whole_tensor_name_and_conflict_when_shared() {
        let index = GraphIndex::default();
        index
            .learn_enqueue(&component("train_step_ps", "arg0"))
            .unwrap();
        let found = index
            .lookup(
                "/job:ps/replica:0/task:0",
                "/job:worker/replica:0/task:0",
                "edge_60_MatMul/ReadVariableOp",
            )
            .unwrap();
        assert_eq!(found.class, TensorClass::DenseRead);
        assert_eq!(found.function.as_deref(), Some("train_step_ps"));
        assert_eq!(
            found.context_name("MatMul/ReadVariableOp", "edge_60_MatMul/ReadVariableOp"),
            "edge_60_MatMul/ReadVariableOp"
        );
        // The same registration again changes nothing.
        assert_eq!(
            index
                .learn_enqueue(&component("train_step_ps", "arg0"))
                .unwrap()
                .conflicts,
            0
        );
        // Another function with the same edge name: no one can tell which
        // variable a call means, so neither gets memory.
        let learned = index
            .learn_enqueue(&component("eval_step_ps", "arg3"))
            .unwrap();
        assert_eq!(learned.conflicts, 1);
        let found = index
            .lookup(
                "/job:ps/replica:0/task:0",
                "/job:worker/replica:0/task:0",
                "edge_60_MatMul/ReadVariableOp",
            )
            .unwrap();
        assert_eq!(found.class, TensorClass::Unknown);
        assert!(
            found.reason.starts_with("graphs disagree"),
            "{}",
            found.reason
        );
    }

    #[test]
    fn garbage_is_an_error_and_the_index_stays_bounded() {
        let index = GraphIndex::new(1);
        assert!(index.learn_register_graph(&[0xff, 0xff, 0xff]).is_err());
        assert_eq!(index.counters.unreadable.load(Ordering::Relaxed), 1);
        let two = tlc_wire::graph::build::PartitionBuilder::new("/job:ps/replica:0/task:0")
            .dense_read("a", "edge_1_a/read", "/job:worker/replica:0/task:0")
            .dense_read("b", "edge_2_b/read", "/job:worker/replica:0/task:0")
            .register_graph_request();
        let learned = index.learn_register_graph(&two).unwrap();
        assert_eq!((learned.tensors, learned.dropped), (2, 1));
        assert_eq!(index.len(), 1);
    }
}
