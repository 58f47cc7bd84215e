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

/// Ops that hand their input on unchanged.
const PASS_THROUGH: &[&str] = &[
    "Identity",
    "Snapshot",
    "StopGradient",
    "PreventGradient",
    "RefIdentity",
    "_HostCast",
    "Cast",
    "Reshape",
];

/// Element-wise ops a gradient may pass through on its way to an apply op
/// (scaling by the learning rate, averaging, clipping, Adam's moments): the
/// element at index i still belongs to parameter i.
const ELEMENTWISE: &[&str] = &[
    "AddN",
    "Add",
    "AddV2",
    "Sub",
    "Mul",
    "MulNoNan",
    "RealDiv",
    "Div",
    "DivNoNan",
    "Neg",
    "Square",
    "Sqrt",
    "Rsqrt",
    "Reciprocal",
    "Maximum",
    "Minimum",
    "ClipByValue",
    "Abs",
    "Sign",
];

/// Ops whose output is a variable's value.
const VARIABLE_READS: &[&str] = &[
    "VariableV2",
    "Variable",
    "ReadVariableOp",
    "_ReadVariablesOp",
    "VarHandleOp",
];

/// The only ops of a graph that reads variables and changes nothing: a
/// TF1 evaluation's or checkpoint's partition on a parameter task is
/// variables, their reads and `_Send`s. A `_Recv`, an assign, an apply, a
/// queue or an accumulator makes it part of training.
const READ_ONLY_OPS: &[&str] = &[
    "VariableV2",
    "Variable",
    "VarHandleOp",
    "ReadVariableOp",
    "Identity",
    "Snapshot",
    "Const",
    "NoOp",
    "_Send",
    "_HostSend",
];

/// Ops that gather rows of their first input by the ids of their second.
const GATHERS: &[&str] = &["Gather", "GatherV2", "ResourceGather"];

/// Ops that add gradient rows (input `values`) into the rows their ids
/// (input `ids`) name, summing duplicate ids: `(op, ids, values)`.
const ROW_SUMS: &[(&str, usize, usize)] = &[
    ("SparseAccumulatorApplyGradient", 2, 3),
    ("ScatterAdd", 1, 2),
    ("ResourceScatterAdd", 1, 2),
];

/// Sparse applies: each (indices[i], grad[i]) updates its row on its own,
/// a duplicate id twice: `(op, ids, values)`, from TensorFlow's op
/// definitions (`var, accum, lr, grad, indices, ...` and the like).
const ROW_APPLIES: &[(&str, usize, usize)] = &[
    ("SparseApplyMomentum", 4, 3),
    ("ResourceSparseApplyMomentum", 4, 3),
    ("ResourceSparseApplyKerasMomentum", 4, 3),
    ("SparseApplyAdagrad", 4, 3),
    ("ResourceSparseApplyAdagrad", 4, 3),
    ("SparseApplyAdagradV2", 5, 4),
    ("ResourceSparseApplyAdagradV2", 5, 4),
    ("SparseApplyFtrl", 4, 3),
    ("ResourceSparseApplyFtrl", 4, 3),
    ("SparseApplyFtrlV2", 4, 3),
    ("ResourceSparseApplyFtrlV2", 4, 3),
];

/// Dense update ops that only collect a gradient, to be averaged with
/// others and applied later (`SyncReplicasOptimizer`'s accumulators).
const ACCUMULATORS: &[&str] = &[
    "AccumulatorApplyGradient",
    "ResourceAccumulatorApplyGradient",
];

/// Ops that consume a dense gradient: every element updates its parameter.
const DENSE_UPDATES: &[&str] = &[
    "AccumulatorApplyGradient",
    "ResourceAccumulatorApplyGradient",
    "AssignAdd",
    "AssignSub",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "AssignVariableOp",
    "Assign",
];

/// Dense update ops that set the variable to their input rather than add
/// it: a gradient reaches them only combined with the variable or a rate
/// (`v.assign(v - lr * g)`); a value that arrives as it is, is written.
const SETS: &[&str] = &["Assign", "AssignVariableOp"];

/// Whether an op moves rows around or works on sparse data: its output (or
/// its input) does not keep a fixed element-to-parameter map.
fn is_sparse_op(op: &str) -> bool {
    op.contains("Gather")
        || op.contains("Scatter")
        || op.contains("Sparse")
        || op.contains("Segment")
        || op.contains("Stitch")
        || op.contains("DynamicPartition")
        || op.starts_with("Unique")
        || op.contains("Embedding")
        || op == "TensorListGather"
}

/// Whether an op applies a dense gradient (`ApplyMomentum`,
/// `ResourceApplyAdam`, `AccumulatorApplyGradient`, `AssignSubVariableOp`...).
fn is_dense_update(op: &str) -> bool {
    DENSE_UPDATES.contains(&op)
        || (op.starts_with("Apply") && !op.contains("Sparse"))
        || (op.starts_with("ResourceApply") && !op.contains("Sparse"))
}

/// Optimizers whose update divides by a running mean (or sum) of squared
/// gradients, or by one of their maxima, as TensorFlow names their fused
/// apply ops after `Apply`, `ResourceApply`, `SparseApply` or
/// `ResourceSparseApply`.
const ADAPTIVE_OPTIMIZERS: &[&str] = &[
    "Adam",
    "AdamWithAmsgrad",
    "AdaMax",
    "Adagrad",
    "AdagradV2",
    "AdagradDA",
    "ProximalAdagrad",
    "Adadelta",
    "RMSProp",
    "CenteredRMSProp",
    "Ftrl",
    "FtrlV2",
];

/// Whether an op applies a gradient with an adaptive optimizer
/// (`ApplyAdam`, `ResourceSparseApplyAdagradV2`, ...).
pub fn is_adaptive_apply(op: &str) -> bool {
    let op = op.strip_prefix("Resource").unwrap_or(op);
    let op = op.strip_prefix("Sparse").unwrap_or(op);
    op.strip_prefix("Apply")
        .is_some_and(|optimizer| ADAPTIVE_OPTIMIZERS.contains(&optimizer))
}

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

fn is_send(op: &str) -> bool {
    op == "_Send" || op == "_HostSend"
}

fn is_recv(op: &str) -> bool {
    op == "_Recv" || op == "_HostRecv"
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
                return Classified {
                    class: TensorClass::DenseRead,
                    reason: format!("reads variable ({op} {})", node.name),
                    output,
                    function: None,
                    accumulated: false,
                    adaptive: false,
                    rows: None,
                    read_only: false,
                };
            }
            if is_sparse_op(op) {
                return Classified {
                    class: TensorClass::Sparse,
                    reason: format!("gathered by {op} {}", node.name),
                    output,
                    function: None,
                    accumulated: false,
                    adaptive: false,
                    rows: None,
                    read_only: false,
                };
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
                    return Classified {
                        class: TensorClass::Sparse,
                        reason: format!("feeds {op} {}", node.name),
                        output: 0,
                        function: None,
                        accumulated: false,
                        adaptive: false,
                        rows: None,
                        read_only: false,
                    };
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
    Classified {
        class: TensorClass::Unknown,
        reason: reason.into(),
        output,
        function: None,
        accumulated: false,
        adaptive: false,
        rows: None,
        read_only: false,
    }
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
mod tests {
    use super::*;
    use tlc_wire::graph::proto::AttrValue;

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            device: String::new(),
            attr: HashMap::new(),
        }
    }

    const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";

    fn transfer(
        name: &str,
        op: &str,
        input: &[&str],
        tensor: &str,
        from: &str,
        to: &str,
    ) -> NodeDef {
        let mut n = node(name, op, input);
        for (key, value) in [
            ("tensor_name", tensor),
            ("send_device", from),
            ("recv_device", to),
        ] {
            n.attr.insert(
                key.into(),
                AttrValue {
                    s: Some(value.as_bytes().to_vec()),
                    r#type: None,
                    ..Default::default()
                },
            );
        }
        n
    }

    fn classes(nodes: &[NodeDef]) -> Vec<(String, TensorClass, String)> {
        let mut found: Vec<_> = classify_body(nodes, None)
            .into_iter()
            .map(|(t, c)| (t.tensor_name, c.class, c.reason))
            .collect();
        found.sort();
        found
    }

    #[test]
    fn a_ps_partition_of_dense_and_sparse_training() {
        let nodes = vec![
            node("w1", "VariableV2", &[]),
            node("w1/read", "Identity", &["w1"]),
            transfer("send_w1", "_Send", &["w1/read"], "edge_12_w1/read", PS, W0),
            node("emb", "VariableV2", &[]),
            node("lookup", "GatherV2", &["emb", "recv_ids", "axis"]),
            transfer("send_rows", "_Send", &["lookup"], "edge_7_lookup", PS, W0),
            transfer("recv_ids", "_Recv", &[], "edge_3_ids", W0, PS),
            transfer("recv_g", "_Recv", &[], "edge_40_grad_w1", W0, PS),
            node(
                "apply",
                "ApplyMomentum",
                &["w1", "acc", "lr", "recv_g", "m"],
            ),
            transfer("recv_vals", "_Recv", &[], "edge_41_grad_emb", W0, PS),
            node("scaled", "Mul", &["recv_vals", "lr"]),
            node(
                "sparse",
                "SparseAccumulatorApplyGradient",
                &["h", "s", "recv_ids", "scaled"],
            ),
            transfer("recv_odd", "_Recv", &[], "edge_50_x", W0, PS),
            node("mm", "MatMul", &["recv_odd", "w1/read"]),
            // Within the task: never on the network.
            transfer("local", "_Send", &["w1/read"], "edge_9_w1/read", PS, PS),
        ];
        let found = classes(&nodes);
        let class_of = |name: &str| found.iter().find(|f| f.0 == name).map(|f| f.1);
        assert_eq!(found.len(), 6, "{found:?}");
        assert_eq!(class_of("edge_12_w1/read"), Some(TensorClass::DenseRead));
        assert_eq!(class_of("edge_7_lookup"), Some(TensorClass::Sparse));
        assert_eq!(class_of("edge_3_ids"), Some(TensorClass::Sparse));
        assert_eq!(
            class_of("edge_40_grad_w1"),
            Some(TensorClass::DenseGradient)
        );
        assert_eq!(class_of("edge_41_grad_emb"), Some(TensorClass::Sparse));
        assert_eq!(class_of("edge_50_x"), Some(TensorClass::Unknown));
    }

    #[test]
    fn function_form_inputs_and_arguments() {
        let nodes = vec![
            node("ReadVariableOp", "ReadVariableOp", &["resource_arg"]),
            transfer(
                "send",
                "_Send",
                &["ReadVariableOp:value:0"],
                "edge_5_ReadVariableOp",
                PS,
                W0,
            ),
            transfer(
                "send_arg",
                "_Send",
                &["some_arg"],
                "edge_6_some_arg",
                PS,
                W0,
            ),
            transfer("recv", "_Recv", &[], "edge_9_grad", W0, PS),
            node("neg", "Neg", &["recv:tensor:0"]),
            node("mul", "Mul", &["neg:y:0", "lr"]),
            node("apply", "AssignAddVariableOp", &["resource_arg", "mul:z:0"]),
        ];
        let found = classes(&nodes);
        assert_eq!(found[0].1, TensorClass::DenseRead);
        assert_eq!(found[1].1, TensorClass::Unknown, "{found:?}");
        assert!(found[1].2.contains("function argument"));
        assert_eq!(found[2].1, TensorClass::DenseGradient);
    }

    #[test]
    fn adaptive_optimizers_are_told_from_linear_ones() {
        let adaptive = |nodes: &[NodeDef]| -> Vec<(String, bool)> {
            let mut found: Vec<_> = classify_body(nodes, None)
                .into_iter()
                .map(|(t, c)| (t.tensor_name, c.adaptive))
                .collect();
            found.sort();
            found
        };
        let nodes = vec![
            transfer("recv_a", "_Recv", &[], "edge_1_a", W0, PS),
            node(
                "adam",
                "ResourceApplyAdam",
                &["v", "m", "s", "b1", "b2", "lr", "b1", "b2", "eps", "recv_a"],
            ),
            transfer("recv_m", "_Recv", &[], "edge_2_m", W0, PS),
            node(
                "momentum",
                "ApplyMomentum",
                &["w", "acc", "lr", "recv_m", "mom"],
            ),
            // Keras: the second moment from the gradient's square.
            transfer("recv_k", "_Recv", &[], "edge_3_k", W0, PS),
            node("sq", "Square", &["recv_k"]),
            node("v_new", "Mul", &["sq", "one_minus_b2"]),
            node("v_add", "AssignAddVariableOp", &["v", "v_new"]),
            node("m_new", "Mul", &["recv_k", "one_minus_b1"]),
            node("m_add", "AssignAddVariableOp", &["m", "m_new"]),
            // Accumulated: the optimizer is behind the accumulator.
            transfer("recv_s", "_Recv", &[], "edge_4_s", W0, PS),
            node(
                "acc",
                "AccumulatorApplyGradient",
                &["handle", "step", "recv_s"],
            ),
        ];
        assert_eq!(
            adaptive(&nodes),
            [
                ("edge_1_a".to_string(), true),
                ("edge_2_m".to_string(), false),
                ("edge_3_k".to_string(), true),
                ("edge_4_s".to_string(), false),
            ]
        );
        for op in [
            "ApplyAdam",
            "ResourceApplyAdagradV2",
            "ResourceSparseApplyFtrl",
            "ApplyRMSProp",
        ] {
            assert!(is_adaptive_apply(op), "{op}");
        }
        for op in [
            "ApplyMomentum",
            "ResourceApplyKerasMomentum",
            "ApplyGradientDescent",
            "Adam",
            "ApplyAdamX",
        ] {
            assert!(!is_adaptive_apply(op), "{op}");
        }
        // The chief's partition: the apply op on the ps, behind the take.
        let mut apply = node("apply", "ApplyAdam", &["w", "m", "v", "take"]);
        apply.device = PS.into();
        let mut take = node("take", "AccumulatorTakeGradient", &["handle", "n"]);
        take.device = PS.into();
        assert_eq!(
            adaptive_tasks(&[take.clone(), apply.clone(), apply]),
            ["/job:ps/replica:0/task:0"]
        );
        assert!(adaptive_tasks(&[take]).is_empty());
    }

    #[test]
    fn a_gradient_that_also_reaches_other_ops_is_not_dense() {
        let nodes = vec![
            transfer("recv", "_Recv", &[], "edge_1_g", W0, PS),
            node("apply", "ApplyGradientDescent", &["v", "lr", "recv"]),
            node("norm", "L2Loss", &["recv"]),
        ];
        let found = classes(&nodes);
        assert_eq!(found[0].1, TensorClass::Unknown);
        assert!(found[0].2.contains("L2Loss"), "{found:?}");
    }

    #[test]
    fn a_value_assigned_as_it_arrives_is_not_a_gradient() {
        let nodes = vec![
            // A restore from an unsharded checkpoint: the chief sends each
            // saved value, the parameter task assigns it.
            transfer("restored", "_Recv", &[], "edge_1_restore", W0, PS),
            node("id", "Identity", &["restored"]),
            node("restore", "Assign", &["v", "id"]),
            transfer("value", "_Recv", &[], "edge_2_value", W0, PS),
            node("set", "AssignVariableOp", &["handle", "value"]),
            // A gradient step written as `v.assign(v - lr * g)`.
            transfer("g", "_Recv", &[], "edge_3_g", W0, PS),
            node("scaled", "Mul", &["g", "lr"]),
            node("stepped", "Sub", &["read", "scaled"]),
            node("update", "AssignVariableOp", &["handle", "stepped"]),
        ];
        let found = classes(&nodes);
        assert_eq!(found[0].1, TensorClass::Unknown, "{found:?}");
        assert!(found[0].2.contains("Assign restore"), "{found:?}");
        assert_eq!(found[1].1, TensorClass::Unknown, "{found:?}");
        assert_eq!(found[2].1, TensorClass::DenseGradient, "{found:?}");
    }

    #[test]
    fn gradients_applied_on_arrival_are_told_from_accumulated_ones() {
        let nodes = vec![
            transfer("r1", "_Recv", &[], "edge_1_g1", W0, PS),
            node("apply", "ApplyMomentum", &["v", "acc", "lr", "r1", "m"]),
            transfer("r2", "_Recv", &[], "edge_2_g2", W0, PS),
            node(
                "collect",
                "AccumulatorApplyGradient",
                &["handle", "step", "r2"],
            ),
            transfer("r3", "_Recv", &[], "edge_3_g3", W0, PS),
            node("scaled", "Mul", &["r3", "lr"]),
            node("assign", "AssignSubVariableOp", &["v3", "scaled"]),
        ];
        let found: Vec<(String, bool)> = classify_body(&nodes, None)
            .into_iter()
            .map(|(t, c)| {
                assert_eq!(c.class, TensorClass::DenseGradient);
                (t.tensor_name, !c.accumulated)
            })
            .collect();
        assert_eq!(
            found,
            [
                ("edge_1_g1".to_string(), true),
                ("edge_2_g2".to_string(), false),
                ("edge_3_g3".to_string(), true),
            ]
        );
    }

    #[test]
    fn output_index_comes_from_the_send_input() {
        let nodes = vec![
            node("split", "Split", &["axis", "x"]),
            transfer("s", "_Send", &["split:1"], "edge_2_split", PS, W0),
        ];
        let found = classify_body(&nodes, None);
        assert_eq!(found[0].1.output, 1);
    }
}
