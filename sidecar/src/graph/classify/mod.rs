//! What a tensor crossing tasks is, read from the graph that sends or
//! receives it.
//!
//! Graph partitioning (`tensorflow/core/graph/graph_partition.cc`) cuts every
//! edge between tasks into a `_Send` on the producing task and a `_Recv` on
//! the consuming one, both carrying the same `tensor_name` attribute
//! (`edge_<id>_<source node>`) and the two devices. A partition therefore
//! shows one end of each pair: the producer of what it sends, the consumers
//! of what it receives. That is enough to tell the tensors apart:
//!
//! - a `_Send` fed (through `Identity`-like ops) by a variable or a variable
//!   read is a **dense read**: a model value whose elements keep their
//!   meaning from step to step (a pull replica is right for it);
//! - a `_Recv` whose value only flows (through element-wise ops) into dense
//!   apply or accumulate ops is a **dense gradient** (error feedback is right);
//! - anything touching gathers, scatters, sparse ops, segment sums, stitches
//!   or partitions on the way is **sparse**: gathered embedding rows,
//!   `IndexedSlices` values and indices. Their rows change every step;
//! - everything else is **unknown**.
//!
//! Sparse and unknown tensors must never get a context: error feedback or a
//! replica would smear one step's rows into another's.

use std::collections::HashMap;

pub use tlc_core::TensorClass;

use tlc_wire::graph::proto::NodeDef;
use tlc_wire::tf::rendezvous::TaskName;

mod ops;

pub use ops::is_adaptive_apply;
use ops::*;

/// A class and why: `reads variable w1`, `feeds SparseApplyMomentum
/// emb/SparseApplyMomentum`, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// The class.
    pub class: TensorClass,
    /// A short explanation naming the op that decided it.
    pub reason: String,
    /// Which output of the source node is sent (TensorFlow's tensor name
    /// does not say; the `_Send`'s input does).
    pub output: u32,
    /// The function whose body said so (TF2), `None` for a graph (TF1).
    /// Node names are unique in a TF1 graph but only within a function:
    /// two TF2 functions both have a `MatMul/ReadVariableOp`.
    pub function: Option<String>,
    /// A dense gradient that only accumulators consume
    /// (`AccumulatorApplyGradient`: `SyncReplicasOptimizer` averages it with
    /// the other workers' before applying): synchronous training, where
    /// 3LC's single pass is enough. `false` for a gradient applied on
    /// arrival (`ApplyMomentum`, `AssignSubVariableOp`...), where 3LC's lag
    /// adds to the staleness (see [`tlc_context::refine`]), and for
    /// everything that is not a dense gradient.
    pub accumulated: bool,
    /// A dense gradient that an adaptive optimizer applies (Adam, Adagrad,
    /// RMSProp...: its update divides by a running mean of the squared
    /// gradient), as far as this body shows: a fused apply op, or a
    /// `Square` on the gradient's way to an update (Keras's optimizers).
    /// Error feedback keeps the sum of the gradients such an optimizer
    /// sees, not their squares: a gradient sent as rare spikes inflates
    /// the mean it divides by and slows it. Where a gradient only meets an
    /// accumulator here, the optimizer is in another body (the chief's):
    /// the index answers for the task ([`TrainingLedger`](super::training::TrainingLedger)).
    pub adaptive: bool,
    /// For a sparse tensor whose rows are named by row ids that cross
    /// between the same two tasks in the same step: those ids, and what
    /// this tensor is to them (see [`RowKeyed`]). `None` for every other.
    pub rows: Option<RowKeyed>,
    /// A dense read sent by a TF1 graph that only reads variables and
    /// sends them (an evaluation, an unsharded checkpoint, a read after
    /// training): the model's own values, which cross exact. `false` for
    /// everything else, and where two graphs share the name but not this.
    pub read_only: bool,
}

/// A tensor of embedding rows or row ids, paired by the graph.
///
/// A `Gather` on a parameter task whose indices arrive from a worker sends
/// that worker the gathered rows; an `IndexedSlices` gradient arrives as
/// values beside indices at an op that sums duplicate ids
/// (`SparseAccumulatorApplyGradient`, `ScatterAdd`, or the
/// `Unique`/`UnsortedSegmentSum` an optimizer puts before its sparse
/// apply). Either way row `i` of the tensor is table row `ids[i]`, and
/// both sidecars see the ids cross (from the worker to the parameter task)
/// before the rows: state kept per row id is right for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowKeyed {
    /// The rendezvous `tensor_name` of the ids (`edge_54_.../DynamicPartition`),
    /// sent by the worker to the parameter task.
    pub ids: String,
    /// What the tensor is.
    pub role: RowRole,
}

/// What a row-keyed tensor is to its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowRole {
    /// The ids themselves (int64 or int32), to be remembered for the step.
    Ids,
    /// Rows gathered from a table by the ids (a pull).
    Gathered,
    /// Gradient rows for the ids, whose consumer sums duplicates (a push).
    Slices,
    /// Gradient rows for the ids, applied row by row by a sparse apply
    /// (`ResourceSparseApplyMomentum`, ...: TF2's optimizers, after their
    /// own `Unique`/`UnsortedSegmentSum` on the worker). A duplicate id
    /// would be applied twice, so these get memory by row id only in a
    /// call whose ids are all distinct, which the holder checks.
    SlicesApplied,
}

impl Classified {
    /// A class without any of the flags (not accumulated, not adaptive,
    /// no rows, not read-only), from a graph rather than a function.
    pub fn plain(class: TensorClass, reason: impl Into<String>, output: u32) -> Classified {
        Classified {
            class,
            reason: reason.into(),
            output,
            function: None,
            accumulated: false,
            adaptive: false,
            rows: None,
            read_only: false,
        }
    }

    /// Marks a dense gradient as applied by an adaptive optimizer, saying
    /// why after its reason; any other class, or one already marked, is
    /// left as it is.
    pub fn mark_adaptive(&mut self, why: &str) {
        if self.class == TensorClass::DenseGradient && !self.adaptive {
            self.adaptive = true;
            self.reason.push_str("; ");
            self.reason.push_str(why);
        }
    }

    /// The name a tensor's context is kept under. TF1: the node name
    /// (edge ids differ between workers' graphs, node names do not). TF2:
    /// the whole rendezvous name, whose edge id is the same for every
    /// worker running the function but tells two functions' nodes apart.
    /// Either way, a second output of a node gets its own context.
    pub fn context_name(&self, node: &str, tensor_name: &str) -> String {
        let base = match self.function {
            Some(_) => tensor_name,
            None => node,
        };
        match self.output {
            0 => base.to_owned(),
            n => format!("{base}:{n}"),
        }
    }
}

/// The rendezvous identity of one tensor: what a `RecvTensor` request names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RendezvousTensor {
    /// The task producing the tensor (`/job:ps/replica:0/task:0`).
    pub src_task: String,
    /// The task consuming it.
    pub dst_task: String,
    /// The `tensor_name` attribute (`edge_12_w1/read`).
    pub tensor_name: String,
}

/// How far to follow a chain of pass-through ops.
const MAX_DEPTH: usize = 16;

/// The tasks on which a body applies some gradient with an adaptive
/// optimizer (a fused apply op placed there), each once.
pub fn adaptive_tasks(nodes: &[NodeDef]) -> Vec<String> {
    let mut tasks: Vec<String> = Vec::new();
    for node in nodes.iter().filter(|n| is_adaptive_apply(&n.op)) {
        if let Some(task) = task_of(Some(&node.device)) {
            if !tasks.contains(&task) {
                tasks.push(task);
            }
        }
    }
    tasks
}

/// A reference to another node's output, from a `NodeDef` input string.
struct InputRef<'a> {
    node: &'a str,
    output: u32,
}

/// Reads an input string in graph form (`node`, `node:1`) or function form
/// (`node:out_arg:1`); `None` for control inputs (`^node`).
fn parse_input(input: &str) -> Option<InputRef<'_>> {
    if input.starts_with('^') {
        return None;
    }
    let mut parts = input.split(':');
    let node = parts.next()?;
    let rest: Vec<&str> = parts.collect();
    let output = rest
        .last()
        .and_then(|index| index.parse().ok())
        .unwrap_or(0);
    Some(InputRef { node, output })
}

/// One graph or function body, indexed for walking.
struct Body<'a> {
    nodes: &'a [NodeDef],
    by_name: HashMap<&'a str, usize>,
    /// Data consumers of each node (by index), any output.
    consumers: Vec<Vec<usize>>,
}

impl<'a> Body<'a> {
    fn new(nodes: &'a [NodeDef]) -> Body<'a> {
        let by_name: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut consumers = vec![Vec::new(); nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            for input in &node.input {
                if let Some(producer) = parse_input(input).and_then(|r| by_name.get(r.node)) {
                    consumers[*producer].push(i);
                }
            }
        }
        Body {
            nodes,
            by_name,
            consumers,
        }
    }

    /// The node an input comes from, through pass-through ops.
    fn source(&self, input: &str) -> Option<(usize, &'a NodeDef)> {
        let mut name = parse_input(input)?.node;
        for _ in 0..MAX_DEPTH {
            let index = *self.by_name.get(name)?;
            let node = &self.nodes[index];
            if !PASS_THROUGH.contains(&node.op.as_str()) {
                return Some((index, node));
            }
            name = parse_input(node.input.first()?)?.node;
        }
        None
    }

    /// The `_Recv` an input comes from, through pass-through ops.
    fn recv_behind(&self, input: &str) -> Option<usize> {
        self.source(input)
            .filter(|(_, node)| is_recv(&node.op))
            .map(|(index, _)| index)
    }

    /// For a `_Send` of rows gathered from a variable along axis 0: the
    /// `_Recv` that brought the ids.
    fn gathered_rows(&self, send: &NodeDef) -> Option<usize> {
        let (_, gather) = self.source(send.input.first()?)?;
        if !GATHERS.contains(&gather.op.as_str()) {
            return None;
        }
        // A `ResourceGather` reads a resource variable by definition; its
        // handle is often a function argument (TF2), not a node.
        if gather.op != "ResourceGather" {
            let (_, table) = self.source(gather.input.first()?)?;
            if !VARIABLE_READS.contains(&table.op.as_str()) {
                return None;
            }
        }
        if gather.op == "GatherV2" {
            // Rows only along axis 0, and without batch dimensions.
            let (_, axis) = self.source(gather.input.get(2)?)?;
            if axis.const_int()? != 0 {
                return None;
            }
        }
        if gather.attr.contains_key("batch_dims") && gather_batch_dims(gather) != Some(0) {
            return None;
        }
        self.recv_behind(gather.input.get(1)?)
    }

    /// For a `_Recv` of gradient rows: the `_Recv` of their ids, if every
    /// op the rows reach adds them into the rows the ids name, and whether
    /// one applies them row by row ([`RowRole::SlicesApplied`]) rather
    /// than summing duplicates ([`RowRole::Slices`]).
    fn slices_ids(&self, recv: usize) -> Option<(usize, RowRole)> {
        let name = self.nodes[recv].name.as_str();
        let is_this = |input: Option<&String>| {
            input
                .and_then(|i| parse_input(i))
                .is_some_and(|r| r.node == name && r.output == 0)
        };
        let mut ids = None;
        let mut role = RowRole::Slices;
        for &consumer in &self.consumers[recv] {
            let node = &self.nodes[consumer];
            let found = if node.op == "UnsortedSegmentSum" && is_this(node.input.first()) {
                // The optimizer's sum of duplicates: segment ids are
                // `Unique(ids).idx`.
                let segments = parse_input(node.input.get(1)?)?;
                let unique = &self.nodes[*self.by_name.get(segments.node)?];
                (unique.op == "Unique" && segments.output == 1)
                    .then(|| self.recv_behind(unique.input.first()?))
                    .flatten()
            } else {
                let applies = ROW_APPLIES.iter().find(|(op, _, _)| node.op == *op);
                let &(_, id_input, value_input) =
                    applies.or_else(|| ROW_SUMS.iter().find(|(op, _, _)| node.op == *op))?;
                if !is_this(node.input.get(value_input)) {
                    return None;
                }
                if applies.is_some() {
                    role = RowRole::SlicesApplied;
                }
                self.recv_behind(node.input.get(id_input)?)
            };
            match (found, ids) {
                (None, _) => return None,
                (Some(f), Some(known)) if f != known => return None,
                (Some(f), _) => ids = Some(f),
            }
        }
        ids.map(|ids| (ids, role))
    }

    /// The class of what a `_Send` sends, from its producer chain.
    fn classify_send(&self, send: &NodeDef) -> Classified {
        let Some(first) = send.input.iter().find_map(|i| parse_input(i)) else {
            return unknown(0, "a _Send without a data input");
        };
        let output = first.output;
        let mut name = first.node;
        for _ in 0..MAX_DEPTH {
            let Some(&index) = self.by_name.get(name) else {
                return unknown(output, format!("sent from function argument {name}"));
            };
            let node = &self.nodes[index];
            let op = node.op.as_str();
            if VARIABLE_READS.contains(&op) {
                return Classified::plain(
                    TensorClass::DenseRead,
                    format!("reads variable ({op} {})", node.name),
                    output,
                );
            }
            if is_sparse_op(op) {
                return Classified::plain(
                    TensorClass::Sparse,
                    format!("gathered by {op} {}", node.name),
                    output,
                );
            }
            if !PASS_THROUGH.contains(&op) {
                return unknown(output, format!("sent from {op} {}", node.name));
            }
            match node.input.iter().find_map(|i| parse_input(i)) {
                Some(input) => name = input.node,
                None => return unknown(output, format!("{op} {} without input", node.name)),
            }
        }
        unknown(output, "producer chain too long")
    }

    /// The class of what a `_Recv` receives, from every op its value reaches.
    fn classify_recv(&self, recv: usize) -> Classified {
        let mut dense: Option<&NodeDef> = None;
        let mut applied_on_arrival = false;
        let mut accumulated = false;
        let mut adaptive = false;
        let mut other: Option<&NodeDef> = None;
        // (node, depth, whether an element-wise op has combined the value
        // with something on the way).
        let mut frontier = vec![(recv, 0usize, false)];
        let mut seen = vec![recv];
        while let Some((index, depth, combined)) = frontier.pop() {
            for &consumer in &self.consumers[index] {
                if seen.contains(&consumer) {
                    continue;
                }
                seen.push(consumer);
                let node = &self.nodes[consumer];
                let op = node.op.as_str();
                if is_sparse_op(op) {
                    return Classified::plain(
                        TensorClass::Sparse,
                        format!("feeds {op} {}", node.name),
                        0,
                    );
                }
                if SETS.contains(&op) && !combined {
                    // A value written as it arrived (a restore from an
                    // unsharded checkpoint, `v.assign(value)`): the model
                    // itself, not a gradient.
                    other.get_or_insert(node);
                } else if is_dense_update(op) {
                    dense.get_or_insert(node);
                    adaptive |= is_adaptive_apply(op);
                    if ACCUMULATORS.contains(&op) {
                        accumulated = true;
                    } else {
                        applied_on_arrival = true;
                    }
                } else if PASS_THROUGH.contains(&op) && depth + 1 < MAX_DEPTH {
                    frontier.push((consumer, depth + 1, combined));
                } else if ELEMENTWISE.contains(&op) && depth + 1 < MAX_DEPTH {
                    adaptive |= op == "Square";
                    frontier.push((consumer, depth + 1, true));
                } else {
                    other.get_or_insert(node);
                }
            }
        }
        match (dense, other) {
            (Some(d), None) => Classified {
                class: TensorClass::DenseGradient,
                reason: format!("feeds {} {}", d.op, d.name),
                output: 0,
                function: None,
                accumulated: accumulated && !applied_on_arrival,
                adaptive,
                rows: None,
                read_only: false,
            },
            (_, Some(o)) => unknown(0, format!("feeds {} {}", o.op, o.name)),
            (None, None) => unknown(0, "received but not consumed"),
        }
    }
}

fn unknown(output: u32, reason: impl Into<String>) -> Classified {
    Classified::plain(TensorClass::Unknown, reason, output)
}

/// A gather's `batch_dims` attribute, when it is an integer.
fn gather_batch_dims(gather: &NodeDef) -> Option<i64> {
    gather.attr.get("batch_dims")?.i
}

/// The task part of a device attribute, as the rendezvous key's device
/// names it.
fn task_of(device: Option<&str>) -> Option<String> {
    TaskName::of_device(device?).map(|t| t.prefix())
}

/// Every tensor that one graph or function body sends to or receives from
/// another task, with its class. Pairs within one task are left out (they
/// never cross the network). `function` names the function the body is
/// of, `None` for a graph.
pub fn classify_body(
    nodes: &[NodeDef],
    function: Option<&str>,
) -> Vec<(RendezvousTensor, Classified)> {
    let body = Body::new(nodes);
    // TF2 functions are left out: a component function that reads may be
    // one half of a training step whose other half applies.
    let read_only =
        function.is_none() && nodes.iter().all(|n| READ_ONLY_OPS.contains(&n.op.as_str()));
    // (node index, tensor, class) of every cross-task transfer.
    let mut found: Vec<(usize, RendezvousTensor, Classified)> = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let op = node.op.as_str();
        if !is_send(op) && !is_recv(op) {
            continue;
        }
        let (Some(src_task), Some(dst_task), Some(tensor_name)) = (
            task_of(node.attr_str("send_device")),
            task_of(node.attr_str("recv_device")),
            node.attr_str("tensor_name"),
        ) else {
            continue;
        };
        if src_task == dst_task {
            continue;
        }
        let mut classified = if is_send(op) {
            body.classify_send(node)
        } else {
            body.classify_recv(index)
        };
        classified.function = function.map(str::to_owned);
        classified.read_only = read_only && classified.class == TensorClass::DenseRead;
        let tensor = RendezvousTensor {
            src_task,
            dst_task,
            tensor_name: tensor_name.to_owned(),
        };
        found.push((index, tensor, classified));
    }
    pair_rows(&body, &mut found);
    found.into_iter().map(|(_, t, c)| (t, c)).collect()
}

/// Marks the sparse tensors whose row ids the graph names, and those ids
/// ([`RowKeyed`]). The ids must cross between the same two tasks as the
/// rows, from the worker: the rows' requester (a gather) or sender (a
/// gradient).
fn pair_rows(body: &Body<'_>, found: &mut [(usize, RendezvousTensor, Classified)]) {
    let mut pairs = Vec::new();
    for (at, (index, tensor, classified)) in found.iter().enumerate() {
        if classified.class != TensorClass::Sparse {
            continue;
        }
        let node = &body.nodes[*index];
        let (found_ids, worker) = if is_send(&node.op) {
            (
                body.gathered_rows(node).map(|ids| (ids, RowRole::Gathered)),
                &tensor.dst_task,
            )
        } else {
            (body.slices_ids(*index), &tensor.src_task)
        };
        let Some((ids, role)) = found_ids else {
            continue;
        };
        let Some(ids_at) = found.iter().position(|(i, _, _)| *i == ids) else {
            continue;
        };
        let ids_tensor = &found[ids_at].1;
        if &ids_tensor.src_task == worker && ids_tensor.dst_task != *worker {
            pairs.push((at, ids_at, role));
        }
    }
    for (at, ids_at, role) in pairs {
        let ids = found[ids_at].1.tensor_name.clone();
        found[ids_at].2.rows = Some(RowKeyed {
            ids: ids.clone(),
            role: RowRole::Ids,
        });
        found[at].2.rows = Some(RowKeyed { ids, role });
    }
}

#[cfg(test)]
mod tests;
