//! The classifier on hand-built bodies: one shape of graph per test.

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

fn transfer(name: &str, op: &str, input: &[&str], tensor: &str, from: &str, to: &str) -> NodeDef {
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
