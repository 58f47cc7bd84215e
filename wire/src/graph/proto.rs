//! The parts of TensorFlow's graph messages that classification reads,
//! written by hand with `prost` like [`crate::tf::proto`].
//!
//! Field numbers follow TensorFlow 2.21 (`protobuf/worker.proto`,
//! `framework/graph.proto`, `node_def.proto`, `function.proto`,
//! `attr_value.proto`, `protobuf/eager_service.proto`), checked against the
//! `*.pb.h` headers in the `tensorflow` 2.21 wheel. Only the fields tlc
//! reads are declared; prost skips the others, which is what we want: the
//! sidecar forwards the original bytes and only reads a copy, so nothing
//! here is ever re-encoded toward TensorFlow. Skipping also keeps decoding
//! cheap: a `Const` node's tensor value (`AttrValue.tensor`) is never
//! materialised.

use std::collections::HashMap;

/// `tensorflow.RegisterGraphRequest`: a master registers one partition of a
/// graph on a worker (`/tensorflow.WorkerService/RegisterGraph`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterGraphRequest {
    /// The partition to run on the receiving task.
    #[prost(message, optional, tag = "2")]
    pub graph_def: Option<GraphDef>,
}

/// `tensorflow.GraphDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    /// The nodes.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
    /// Functions the graph calls.
    #[prost(message, optional, tag = "2")]
    pub library: Option<FunctionDefLibrary>,
}

/// `tensorflow.FunctionDefLibrary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FunctionDefLibrary {
    /// The functions.
    #[prost(message, repeated, tag = "1")]
    pub function: Vec<FunctionDef>,
}

/// `tensorflow.FunctionDef`: a function body in the function format, where
/// inputs read `node:output_arg:index` or name an argument of the signature.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FunctionDef {
    /// The signature (only its name is read).
    #[prost(message, optional, tag = "1")]
    pub signature: Option<OpDef>,
    /// The body.
    #[prost(message, repeated, tag = "3")]
    pub node_def: Vec<NodeDef>,
}

/// `tensorflow.OpDef`, the signature of a function.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OpDef {
    /// The function's name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `tensorflow.NodeDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    /// Unique name within its graph or function.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The op, e.g. `_Send`, `ApplyMomentum`.
    #[prost(string, tag = "2")]
    pub op: String,
    /// Inputs: `node`, `node:index`, `node:output_arg:index` (functions) or
    /// `^node` (control).
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    /// The device the node runs on.
    #[prost(string, tag = "4")]
    pub device: String,
    /// Attributes (`tensor_name`, `send_device`, `recv_device`, ...).
    #[prost(map = "string, message", tag = "5")]
    pub attr: HashMap<String, AttrValue>,
}

/// `tensorflow.AttrValue`, only the kinds classification reads. In
/// TensorFlow these fields form a `oneof`; read as plain optional fields
/// they decode the same.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrValue {
    /// A string (`tensor_name`, device names).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub s: Option<Vec<u8>>,
    /// A data type (`T`, `tensor_type`).
    #[prost(int32, optional, tag = "6")]
    pub r#type: Option<i32>,
    /// An integer (`batch_dims`).
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// A tensor (a `Const`'s `value`).
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<crate::tf::proto::TensorProto>,
}

impl NodeDef {
    /// A string attribute, if present and UTF-8.
    pub fn attr_str(&self, name: &str) -> Option<&str> {
        let value = self.attr.get(name)?.s.as_deref()?;
        std::str::from_utf8(value).ok()
    }

    /// A type attribute, if present.
    pub fn attr_type(&self, name: &str) -> Option<i32> {
        self.attr.get(name)?.r#type
    }

    /// The single integer a scalar `Const` holds, if this is one.
    pub fn const_int(&self) -> Option<i64> {
        if self.op != "Const" {
            return None;
        }
        let tensor = self.attr.get("value")?.tensor.as_ref()?;
        // DT_INT32 and DT_INT64.
        if tensor.dtype != 3 && tensor.dtype != 9 {
            return None;
        }
        let scalar = tensor
            .tensor_shape
            .as_ref()
            .is_none_or(|s| s.dim.is_empty());
        if !scalar {
            return None;
        }
        match (tensor.int_val.as_slice(), tensor.int64_val.as_slice()) {
            ([v], []) => Some(i64::from(*v)),
            ([], [v]) => Some(*v),
            ([], []) => {
                let c = &tensor.tensor_content;
                match c.len() {
                    // TensorFlow leaves every value field empty for a zero.
                    0 => Some(0),
                    4 => Some(i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                    8 => Some(i64::from_le_bytes(c[..8].try_into().ok()?)),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// `tensorflow.eager.EnqueueRequest`: eager operations and function
/// registrations a client queues on a remote task
/// (`/tensorflow.eager.EagerService/Enqueue`, and each message of
/// `StreamingEnqueue`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EnqueueRequest {
    /// The eager context.
    #[prost(fixed64, tag = "1")]
    pub context_id: u64,
    /// The queued items.
    #[prost(message, repeated, tag = "3")]
    pub queue: Vec<QueueItem>,
}

/// `tensorflow.eager.QueueItem`, only its `register_function` case.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueueItem {
    /// A function (or a component of a multi-device function) to register.
    #[prost(message, optional, tag = "4")]
    pub register_function: Option<RegisterFunctionOp>,
}

/// `tensorflow.eager.RegisterFunctionOp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterFunctionOp {
    /// The function.
    #[prost(message, optional, tag = "1")]
    pub function_def: Option<FunctionDef>,
    /// Whether it is one task's component of a multi-device function.
    #[prost(bool, tag = "2")]
    pub is_component_function: bool,
    /// Functions it calls.
    #[prost(message, optional, tag = "3")]
    pub library: Option<FunctionDefLibrary>,
}
