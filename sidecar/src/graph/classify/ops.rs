//! What TensorFlow's ops are to the classifier: which hand a value on,
//! which are element-wise, which read, gather, sum rows, apply or collect
//! a gradient, and which optimizers are adaptive. The names are
//! TensorFlow's op names (`tensorflow/core/ops/*.cc`).

/// Ops that hand their input on unchanged.
pub(super) const PASS_THROUGH: &[&str] = &[
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
pub(super) const ELEMENTWISE: &[&str] = &[
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
pub(super) const VARIABLE_READS: &[&str] = &[
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
pub(super) const READ_ONLY_OPS: &[&str] = &[
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
pub(super) const GATHERS: &[&str] = &["Gather", "GatherV2", "ResourceGather"];

/// Ops that add gradient rows (input `values`) into the rows their ids
/// (input `ids`) name, summing duplicate ids: `(op, ids, values)`.
pub(super) const ROW_SUMS: &[(&str, usize, usize)] = &[
    ("SparseAccumulatorApplyGradient", 2, 3),
    ("ScatterAdd", 1, 2),
    ("ResourceScatterAdd", 1, 2),
];

/// Sparse applies: each (indices[i], grad[i]) updates its row on its own,
/// a duplicate id twice: `(op, ids, values)`, from TensorFlow's op
/// definitions (`var, accum, lr, grad, indices, ...` and the like).
pub(super) const ROW_APPLIES: &[(&str, usize, usize)] = &[
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
pub(super) const ACCUMULATORS: &[&str] = &[
    "AccumulatorApplyGradient",
    "ResourceAccumulatorApplyGradient",
];

/// Ops that consume a dense gradient: every element updates its parameter.
pub(super) const DENSE_UPDATES: &[&str] = &[
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
pub(super) const SETS: &[&str] = &["Assign", "AssignVariableOp"];

/// Whether an op moves rows around or works on sparse data: its output (or
/// its input) does not keep a fixed element-to-parameter map.
pub(super) fn is_sparse_op(op: &str) -> bool {
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
pub(super) fn is_dense_update(op: &str) -> bool {
    DENSE_UPDATES.contains(&op)
        || (op.starts_with("Apply") && !op.contains("Sparse"))
        || (op.starts_with("ResourceApply") && !op.contains("Sparse"))
}

/// Optimizers whose update divides by a running mean (or sum) of squared
/// gradients, or by one of their maxima, as TensorFlow names their fused
/// apply ops after `Apply`, `ResourceApply`, `SparseApply` or
/// `ResourceSparseApply`.
pub(super) const ADAPTIVE_OPTIMIZERS: &[&str] = &[
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

pub(super) fn is_send(op: &str) -> bool {
    op == "_Send" || op == "_HostSend"
}

pub(super) fn is_recv(op: &str) -> bool {
    op == "_Recv" || op == "_HostRecv"
}
