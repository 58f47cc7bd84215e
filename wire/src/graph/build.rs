//! Partition graphs as TensorFlow's partitioner writes them, for the
//! emulated job (`tlc-demo`) and tests: a parameter task's partition with
//! `_Send`s of variable reads or gathered rows and `_Recv`s of gradients
//! feeding apply ops. Real TensorFlow's graphs are the fixtures under
//! `wire/tests/fixtures/graphs/`; this builds the same shapes by hand.

use std::collections::HashMap;

use prost::Message;

use super::proto::{AttrValue, GraphDef, NodeDef, RegisterGraphRequest};

/// Builds one task's partition graph.
#[derive(Debug, Clone)]
pub struct PartitionBuilder {
    device: String,
    nodes: Vec<NodeDef>,
}

fn device_of(task: &str) -> String {
    format!("{task}/device:CPU:0")
}

fn string_attr(value: &str) -> AttrValue {
    AttrValue {
        s: Some(value.as_bytes().to_vec()),
        r#type: None,
        ..Default::default()
    }
}

impl PartitionBuilder {
    /// An empty partition of `task` (`/job:ps/replica:0/task:0`).
    pub fn new(task: &str) -> PartitionBuilder {
        PartitionBuilder {
            device: device_of(task),
            nodes: Vec::new(),
        }
    }

    fn add(&mut self, name: &str, op: &str, inputs: &[&str]) {
        self.nodes.push(NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            device: self.device.clone(),
            attr: HashMap::new(),
        });
    }

    fn transfer(&mut self, op: &str, input: Option<&str>, tensor_name: &str, from: &str, to: &str) {
        let name = format!("{}_{op}", tensor_name.replace('/', "_"));
        self.add(&name, op, input.as_slice());
        let Some(node) = self.nodes.last_mut() else {
            return;
        };
        node.attr
            .insert("tensor_name".into(), string_attr(tensor_name));
        node.attr.insert("send_device".into(), string_attr(from));
        node.attr.insert("recv_device".into(), string_attr(to));
    }

    fn variable(&mut self, variable: &str) {
        if !self.nodes.iter().any(|n| n.name == variable) {
            self.add(variable, "VariableV2", &[]);
        }
    }

    /// A `_Send` of `node`'s output from this task to `requester`.
    fn send(&mut self, node: &str, tensor_name: &str, requester: &str) {
        let device = self.device.clone();
        self.transfer(
            "_Send",
            Some(node),
            tensor_name,
            &device,
            &device_of(requester),
        );
    }

    /// A `_Recv` from `sender` on this task, consumed by an `op` node whose
    /// inputs are `variable`, `other` and the received value.
    fn receive_into(
        &mut self,
        op: &str,
        variable: &str,
        other: &str,
        tensor_name: &str,
        sender: &str,
    ) {
        self.variable(variable);
        let device = self.device.clone();
        self.transfer("_Recv", None, tensor_name, &device_of(sender), &device);
        let recv = self
            .nodes
            .last()
            .map(|n| n.name.clone())
            .unwrap_or_default();
        self.add(&format!("{recv}/{op}"), op, &[variable, other, &recv]);
    }

    /// `variable` held here, its value (`variable/read`) sent to
    /// `requester` as `tensor_name`: a dense pull.
    pub fn dense_read(mut self, variable: &str, tensor_name: &str, requester: &str) -> Self {
        self.variable(variable);
        let read = format!("{variable}/read");
        if !self.nodes.iter().any(|n| n.name == read) {
            self.add(&read, "Identity", &[variable]);
        }
        self.send(&read, tensor_name, requester);
        self
    }

    /// A gradient of `variable` received from `sender` as `tensor_name` and
    /// applied on arrival by `ApplyGradientDescent`: a dense push of
    /// asynchronous training.
    pub fn dense_gradient(mut self, variable: &str, tensor_name: &str, sender: &str) -> Self {
        self.receive_into("ApplyGradientDescent", variable, "lr", tensor_name, sender);
        self
    }

    /// A gradient of `variable` received from `sender` as `tensor_name` and
    /// collected by `AccumulatorApplyGradient`, to be averaged with the
    /// other workers' (`SyncReplicasOptimizer`): a dense push of
    /// synchronous training.
    pub fn accumulated_gradient(mut self, variable: &str, tensor_name: &str, sender: &str) -> Self {
        self.receive_into(
            "AccumulatorApplyGradient",
            variable,
            "local_step",
            tensor_name,
            sender,
        );
        self
    }

    /// Rows of `variable` gathered here and sent to `requester` as
    /// `tensor_name` (`tf.nn.embedding_lookup` on a table held here).
    pub fn gathered_rows(mut self, variable: &str, tensor_name: &str, requester: &str) -> Self {
        self.variable(variable);
        let gather = format!("{variable}/embedding_lookup");
        self.add(&gather, "GatherV2", &[variable, "ids", "axis"]);
        self.send(&gather, tensor_name, requester);
        self
    }

    /// Sparse gradient values of `variable` received from `sender` as
    /// `tensor_name` and scattered into it.
    pub fn sparse_gradient(mut self, variable: &str, tensor_name: &str, sender: &str) -> Self {
        self.receive_into("ScatterSub", variable, "indices", tensor_name, sender);
        self
    }

    /// The graph.
    pub fn graph(self) -> GraphDef {
        GraphDef {
            node: self.nodes,
            library: None,
        }
    }

    /// A `RegisterGraphRequest` carrying the graph, serialized.
    pub fn register_graph_request(self) -> Vec<u8> {
        RegisterGraphRequest {
            graph_def: Some(self.graph()),
        }
        .encode_to_vec()
    }
}
