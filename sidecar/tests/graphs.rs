//! The graph reader on registrations captured from real TensorFlow 2.21
//! (`tlcd --record`, see fixtures/graphs/README.md): what each tensor that
//! crosses tasks is, exactly as the sidecars will look it up.

use std::path::PathBuf;

use tlc_sidecar::graph::index::Learned;
use tlc_sidecar::graph::{GraphIndex, RowKeyed, RowRole, TensorClass};

const PS: &str = "/job:ps/replica:0/task:0";
const W0: &str = "/job:worker/replica:0/task:0";
const W1: &str = "/job:worker/replica:0/task:1";
const CHIEF: &str = "/job:chief/replica:0/task:0";

fn fixture(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/fixtures/graphs");
    std::fs::read(dir.join(name)).unwrap()
}

/// What `index` learned from the `RegisterGraph` request in fixture `name`.
fn registered(index: &GraphIndex, name: &str) -> Learned {
    index.learn_register_graph(&fixture(name)).unwrap()
}

/// What `index` learned from the `Enqueue` request in fixture `name`.
fn enqueued(index: &GraphIndex, name: &str) -> Learned {
    index.learn_enqueue(&fixture(name)).unwrap()
}

/// What the index pairs the tensor `src` sends `dst` with.
fn rows_of(index: &GraphIndex, src: &str, dst: &str, tensor: &str) -> Option<RowKeyed> {
    index
        .lookup(src, dst, tensor)
        .unwrap_or_else(|| panic!("{tensor} not classified"))
        .rows
}

/// Paired with the ids `ids`, as `role`.
fn paired(ids: &str, role: RowRole) -> Option<RowKeyed> {
    Some(RowKeyed {
        ids: ids.to_owned(),
        role,
    })
}

/// Worker 0's lookup ids and the rows the ps gathers by them, and the
/// gradient's indices and the gradient rows (`slices`) for them, each
/// paired as the ps's one-partition graphs show them.
fn assert_rows_paired(
    index: &GraphIndex,
    (lookup_ids, gathered): (&str, &str),
    (indices, gradient): (&str, &str),
    slices: RowRole,
) {
    assert_eq!(
        rows_of(index, W0, PS, lookup_ids),
        paired(lookup_ids, RowRole::Ids)
    );
    assert_eq!(
        rows_of(index, PS, W0, gathered),
        paired(lookup_ids, RowRole::Gathered)
    );
    assert_eq!(
        rows_of(index, W0, PS, indices),
        paired(indices, RowRole::Ids)
    );
    assert_eq!(rows_of(index, W0, PS, gradient), paired(indices, slices));
}

fn class(index: &GraphIndex, src: &str, dst: &str, name: &str) -> TensorClass {
    index
        .lookup(src, dst, name)
        .unwrap_or_else(|| panic!("{name} not classified"))
        .class
}

#[test]
fn tf2_mlp_component_reads_and_gradients_are_dense() {
    let index = GraphIndex::default();
    for name in [
        "tf2_mlp_ps_component_w0.enqueue.pb",
        "tf2_mlp_ps_component_w1.enqueue.pb",
    ] {
        let learned = enqueued(&index, name);
        assert_eq!(learned.conflicts, 0, "{name}");
        assert_eq!(learned.tensors, 13, "{name}");
    }
    for worker in [W0, W1] {
        for read in [
            "edge_60_MatMul/ReadVariableOp",
            "edge_61_add/ReadVariableOp",
            "edge_63_MatMul_1/ReadVariableOp",
            "edge_66_MatMul_2/ReadVariableOp",
        ] {
            assert_eq!(
                class(&index, PS, worker, read),
                TensorClass::DenseRead,
                "{read}"
            );
        }
        for gradient in [
            "edge_136_gradient_tape/MatMul/MatMul",
            "edge_118_gradient_tape/MatMul_1/MatMul_1",
            "edge_141_gradient_tape/add/Reshape",
        ] {
            assert_eq!(
                class(&index, worker, PS, gradient),
                TensorClass::DenseGradient,
                "{gradient}"
            );
        }
    }
    let read = index
        .lookup(PS, W0, "edge_60_MatMul/ReadVariableOp")
        .unwrap();
    assert!(read
        .function
        .as_deref()
        .unwrap()
        .starts_with("__inference_train_step"));
    // Contexts of a function are named by the whole rendezvous name.
    assert_eq!(
        read.context_name("MatMul/ReadVariableOp", "edge_60_MatMul/ReadVariableOp"),
        "edge_60_MatMul/ReadVariableOp"
    );
}

#[test]
fn tf2_embedding_rows_ids_and_sparse_gradients_are_sparse() {
    let index = GraphIndex::default();
    enqueued(&index, "tf2_embedding_ps_component_w0.enqueue.pb");
    let got = index.lookup(PS, W0, "edge_148_Gather").unwrap();
    assert_eq!(got.class, TensorClass::Sparse);
    assert!(got.reason.contains("ResourceGather"), "{}", got.reason);
    assert_eq!(
        class(&index, W0, PS, "edge_211_UnsortedSegmentSum"),
        TensorClass::Sparse
    );
    assert_eq!(
        class(&index, W0, PS, "edge_212_Unique"),
        TensorClass::Sparse
    );
    assert_eq!(
        class(&index, W0, PS, "edge_71_cond/output/_7"),
        TensorClass::Sparse
    );
    // The dense layer of the same model stays dense.
    assert_eq!(
        class(&index, PS, W0, "edge_152_MatMul/ReadVariableOp"),
        TensorClass::DenseRead
    );
}

/// The same TF2 component, paired by row id: `ResourceGather` takes its
/// table as a function argument (a resource handle, not a read), and the
/// gradient rows, already summed per id on the worker, go with `Unique`'s
/// ids into `ResourceSparseApplyMomentum`, which applies them row by row.
#[test]
fn tf2_embedding_rows_are_paired_with_their_ids() {
    let index = GraphIndex::default();
    enqueued(&index, "tf2_embedding_ps_component_w0.enqueue.pb");
    assert_rows_paired(
        &index,
        ("edge_71_cond/output/_7", "edge_148_Gather"),
        ("edge_212_Unique", "edge_211_UnsortedSegmentSum"),
        RowRole::SlicesApplied,
    );
    assert_eq!(
        rows_of(&index, PS, W0, "edge_152_MatMul/ReadVariableOp"),
        None
    );
}

#[test]
fn tf2_eager_copies_share_one_name_and_stay_unknown() {
    // Every v.numpy() on the coordinator is `edge_2_input`, whatever the
    // variable: never a context.
    let index = GraphIndex::default();
    enqueued(&index, "tf2_eager_copy_a.enqueue.pb");
    assert_eq!(
        class(&index, PS, CHIEF, "edge_2_input"),
        TensorClass::Unknown
    );
    let learned = enqueued(&index, "tf2_eager_copy_b.enqueue.pb");
    assert_eq!(learned.tensors, 1);
    assert_eq!(
        class(&index, PS, CHIEF, "edge_2_input"),
        TensorClass::Unknown
    );
}

#[test]
/// The partitions the emulated job and the tests build classify as built.
fn built_partitions_classify_as_built() {
    let ps = "/job:ps/replica:0/task:0";
    let w0 = "/job:worker/replica:0/task:0";
    let request = tlc_wire::graph::build::PartitionBuilder::new(ps)
        .dense_read("w1", "edge_3_w1/read", w0)
        .dense_gradient("w1", "edge_9_grad_w1", w0)
        .gathered_rows("emb", "edge_4_emb/embedding_lookup", w0)
        .sparse_gradient("emb", "edge_10_grad_emb", w0)
        .register_graph_request();
    let index = GraphIndex::default();
    let learned = index.learn_register_graph(&request).unwrap();
    assert_eq!(learned.tensors, 4);
    let class = |src: &str, dst: &str, name: &str| index.lookup(src, dst, name).map(|c| c.class);
    assert_eq!(
        class(ps, w0, "edge_3_w1/read"),
        Some(TensorClass::DenseRead)
    );
    assert_eq!(
        class(w0, ps, "edge_9_grad_w1"),
        Some(TensorClass::DenseGradient)
    );
    assert_eq!(
        class(ps, w0, "edge_4_emb/embedding_lookup"),
        Some(TensorClass::Sparse)
    );
    assert_eq!(class(w0, ps, "edge_10_grad_emb"), Some(TensorClass::Sparse));
    assert_eq!(class(ps, w0, "edge_9_grad_w1"), None);
}

/// The ps partitions a TF1 worker registers in synchronous embedding
/// training with the table over two ps tasks: each ps gathers its shard's
/// rows by the ids the worker sends, and collects the gradient rows for the
/// same ids in a `SparseConditionalAccumulator`.
#[test]
fn tf1_embedding_rows_are_paired_with_their_ids() {
    let index = GraphIndex::default();
    const PS1: &str = "/job:ps/replica:0/task:1";
    for (name, ps, ids, rows, grad) in [
        (
            "tf1_embedding_sync_2ps_ps1_w0.register_graph.pb",
            PS1,
            "edge_54_embedding_lookup/DynamicPartition",
            "edge_66_embedding_lookup/GatherV2",
            "edge_142_gradients/embedding_lookup/GatherV2_grad/Reshape",
        ),
        (
            "tf1_embedding_sync_2ps_ps0_w0.register_graph.pb",
            PS,
            "edge_58_embedding_lookup/DynamicPartition",
            "edge_67_embedding_lookup/GatherV2_1",
            "edge_137_gradients/embedding_lookup/GatherV2_1_grad/Reshape",
        ),
    ] {
        let learned = registered(&index, name);
        assert_eq!(learned.conflicts, 0, "{name}");
        let rows_of = |src: &str, dst: &str, tensor: &str| rows_of(&index, src, dst, tensor);
        let paired = |role| paired(ids, role);
        assert_eq!(rows_of(W0, ps, ids), paired(RowRole::Ids), "{name}");
        assert_eq!(rows_of(ps, W0, rows), paired(RowRole::Gathered), "{name}");
        assert_eq!(rows_of(W0, ps, grad), paired(RowRole::Slices), "{name}");
        assert_eq!(class(&index, ps, W0, rows), TensorClass::Sparse);
        // The step counter and the dense layers' tensors have no ids.
        for other in [
            "edge_116_sync_rep_local_step/read",
            "edge_102_sync_rep_local_step/read",
        ] {
            if let Some(c) = index.lookup(W0, ps, other) {
                assert_eq!(c.rows, None, "{other}");
            }
        }
    }
}

/// Asynchronous TF1 embedding training on one ps: the gradient's indices
/// cross as a tensor of their own, and the optimizer sums duplicates with
/// `Unique` and `UnsortedSegmentSum` before `SparseApplyMomentum`.
#[test]
fn tf1_async_embedding_gradient_rows_are_paired_with_their_own_indices() {
    let index = GraphIndex::default();
    let learned = registered(&index, "tf1_embedding_async_1ps_w0.register_graph.pb");
    assert_eq!(learned.conflicts, 0);
    assert_rows_paired(
        &index,
        ("edge_118__recv_ids_0", "edge_15_embedding_lookup"),
        (
            "edge_29_gradients/embedding_lookup_grad/Reshape_1",
            "edge_82_gradients/embedding_lookup_grad/Reshape",
        ),
        RowRole::Slices,
    );
    // The momentum hyperparameter crosses too, unpaired.
    assert_eq!(rows_of(&index, W0, PS, "edge_62_Momentum/momentum"), None);
}

#[test]
fn tf1_an_evaluation_reads_exact_and_training_does_not() {
    let index = GraphIndex::default();
    for name in [
        "tf1_mlp_sync_ps_train_w0.register_graph.pb",
        "tf1_mlp_sync_ps_eval_w0.register_graph.pb",
    ] {
        let learned = registered(&index, name);
        assert_eq!(learned.conflicts, 0, "{name}");
    }
    let read = |name: &str| {
        index
            .lookup(PS, W0, name)
            .unwrap_or_else(|| panic!("{name} not classified"))
    };
    // The training step's reads: a replica, within the bound.
    for name in ["edge_11_w0/read", "edge_14_b0/read"] {
        assert_eq!(read(name).class, TensorClass::DenseRead, "{name}");
        assert!(!read(name).read_only, "{name}");
    }
    // The chief's evaluation after training: the model itself.
    for name in ["edge_9_w0/read", "edge_11_b0/read", "edge_14_w1/read"] {
        assert_eq!(read(name).class, TensorClass::DenseRead, "{name}");
        assert!(read(name).read_only, "{name}");
    }
}
