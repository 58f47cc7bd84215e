//! The graph reader on registrations captured from real TensorFlow 2.21
//! (`tlcd --record`, see fixtures/graphs/README.md): what each tensor that
//! crosses tasks is, exactly as the sidecars will look it up.

use std::path::PathBuf;

use tlc_sidecar::graph::{GraphIndex, TensorClass};

const PS: &str = "/job:ps/replica:0/task:0";
const W0: &str = "/job:worker/replica:0/task:0";
const W1: &str = "/job:worker/replica:0/task:1";
const CHIEF: &str = "/job:chief/replica:0/task:0";

fn fixture(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/fixtures/graphs");
    std::fs::read(dir.join(name)).unwrap()
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
        let learned = index.learn_enqueue(&fixture(name)).unwrap();
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
    index
        .learn_enqueue(&fixture("tf2_embedding_ps_component_w0.enqueue.pb"))
        .unwrap();
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

#[test]
fn tf2_eager_copies_share_one_name_and_stay_unknown() {
    // Every v.numpy() on the coordinator is `edge_2_input`, whatever the
    // variable: never a context.
    let index = GraphIndex::default();
    index
        .learn_enqueue(&fixture("tf2_eager_copy_a.enqueue.pb"))
        .unwrap();
    assert_eq!(
        class(&index, PS, CHIEF, "edge_2_input"),
        TensorClass::Unknown
    );
    let learned = index
        .learn_enqueue(&fixture("tf2_eager_copy_b.enqueue.pb"))
        .unwrap();
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
