//! What a read of the step counter looks like on the wire: the node name
//! in the rendezvous key, and the integer scalar in the response.
//!
//! TF1's `tf.train.get_or_create_global_step` makes a variable
//! `global_step`; a read of it crosses tasks as `edge_<id>_global_step/read`
//! (a ref variable) or `edge_<id>_global_step/Read/ReadVariableOp` (a
//! resource variable), and TF2 reads a resource variable with a
//! `ReadVariableOp` under the variable's name. The answer is an int64
//! scalar (the capture `wire/tests/fixtures/captured/int64_global_step`:
//! dtype 9, no shape field, eight bytes of `tensor_content`).

use bytes::Bytes;

use tlc_wire::tf::grpc;
use tlc_wire::tf::proto::{DataType, RecvTensorResponse};
use tlc_wire::tf::recv_tensor;

/// The name TensorFlow gives the step counter variable.
pub const GLOBAL_STEP: &str = "global_step";

/// The last path components of a node that reads a variable's value.
const READ_OPS: &[&str] = &["read", "Read", "ReadVariableOp"];

/// Whether `node` (the node part of a rendezvous tensor name, without
/// `edge_<id>_`) reads the step counter: `global_step` itself (a fetch of
/// the ref variable), or a node under `global_step/` with a read among its
/// components: `global_step/read`, `global_step/Read/ReadVariableOp`, and
/// `global_step/cond/read/Switch`, the one `StopAtStepHook` reads every
/// step (`initialized_value()` builds that `tf.cond`; its untaken branch is
/// dead and ignored). Seen in a recording of the real TF1 job
/// (`run_with_tlcd.sh --record`): those three carry the live value; the
/// initializer's constant (`global_step/Initializer/zeros`) never crosses
/// and would not match, `IsVariableInitialized` and `cond/pred_id` are
/// booleans.
pub fn is_step_counter(node: &str) -> bool {
    let mut parts = node.split('/');
    if parts.next() != Some(GLOBAL_STEP) {
        return false;
    }
    let mut rest = parts.peekable();
    if rest.peek().is_none() {
        return true;
    }
    rest.any(|part| READ_OPS.contains(&part))
}

/// The value of a step counter read: `Some` when `body` (a whole gRPC
/// response body, prefix included) is one `RecvTensorResponse` holding a
/// live `DT_INT64` or `DT_INT32` scalar (no dimensions, or all of size 1),
/// whether in `tensor_content` or in the typed field. Anything else is not
/// a step counter's value and is left alone.
pub fn scalar_value(body: Bytes, limit: usize) -> Option<i64> {
    let message = grpc::parse_single(body, limit).ok()?;
    let response = recv_tensor::decode_response(message).ok()?;
    value_of(&response)
}

/// The integer scalar in `response`, see [`scalar_value`].
fn value_of(response: &RecvTensorResponse) -> Option<i64> {
    if response.is_dead {
        return None;
    }
    let tensor = response.tensor.as_ref()?;
    if let Some(shape) = &tensor.tensor_shape {
        if shape.unknown_rank || shape.dim.iter().any(|d| d.size != 1) {
            return None;
        }
    }
    let content = tensor.tensor_content.as_ref();
    if tensor.dtype == DataType::DtInt64 as i32 {
        match (content.len(), tensor.int64_val.as_slice()) {
            (8, []) => Some(i64::from_le_bytes(content.try_into().ok()?)),
            (0, [value]) => Some(*value),
            _ => None,
        }
    } else if tensor.dtype == DataType::DtInt32 as i32 {
        match (content.len(), tensor.int_val.as_slice()) {
            (4, []) => Some(i64::from(i32::from_le_bytes(content.try_into().ok()?))),
            (0, [value]) => Some(i64::from(*value)),
            _ => None,
        }
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tlc_wire::tf::proto::TensorProto;

    #[test]
    fn step_counter_names() {
        // The names a recording of the real TF1 job showed carrying the
        // value, and the resource-variable forms.
        for read in [
            "global_step",
            "global_step/read",
            "global_step/cond/read/Switch",
            "global_step/Read/ReadVariableOp",
            "global_step/ReadVariableOp",
        ] {
            assert!(is_step_counter(read), "{read}");
        }
        // The same recording's other global_step tensors, and look-alikes.
        for other in [
            "global_step/IsVariableInitialized",
            "global_step/cond/pred_id",
            "global_step/cond/Switch_1",
            "global_step/Initializer/zeros",
            "global_step/Assign",
            "w1/read",
            "sync_replicas/global_step/read",
            "global_step_1/read",
            "",
        ] {
            assert!(!is_step_counter(other), "{other}");
        }
    }

    fn body(tensor: TensorProto, is_dead: bool) -> Bytes {
        let response = RecvTensorResponse {
            tensor: Some(tensor),
            is_dead,
            send_start_micros: 1,
            transport_options: None,
            require_ack: false,
        };
        let (prefix, message) = grpc::encode(response.encode_to_vec().into()).unwrap();
        [prefix, message].concat().into()
    }

    fn int64(value: i64, dims: &[i64]) -> TensorProto {
        let content = value.to_le_bytes().to_vec().into();
        let mut tensor = TensorProto::shaped(DataType::DtInt64 as i32, dims, content);
        // A scalar as TensorFlow sends it: no shape field at all.
        if dims.is_empty() {
            tensor.tensor_shape = None;
        }
        tensor
    }

    #[test]
    fn the_captured_global_step_read_is_zero() {
        let captured =
            include_bytes!("../../../wire/tests/fixtures/captured/int64_global_step.response.grpc");
        assert_eq!(scalar_value(Bytes::from_static(captured), 4096), Some(0));
    }

    #[test]
    fn integer_scalars_only() {
        assert_eq!(scalar_value(body(int64(99, &[]), false), 4096), Some(99));
        assert_eq!(
            scalar_value(body(int64(-3, &[1, 1]), false), 4096),
            Some(-3)
        );
        assert_eq!(scalar_value(body(int64(99, &[]), true), 4096), None, "dead");
        assert_eq!(scalar_value(body(int64(99, &[2]), false), 4096), None);
        let mut two = int64(1, &[2]);
        two.tensor_content = [1i64, 2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>()
            .into();
        assert_eq!(scalar_value(body(two, false), 4096), None, "a vector");
        let typed = TensorProto {
            dtype: DataType::DtInt64 as i32,
            int64_val: vec![42],
            ..Default::default()
        };
        assert_eq!(scalar_value(body(typed, false), 4096), Some(42));
        let int32 = TensorProto {
            dtype: DataType::DtInt32 as i32,
            tensor_content: 7i32.to_le_bytes().to_vec().into(),
            ..Default::default()
        };
        assert_eq!(scalar_value(body(int32, false), 4096), Some(7));
        let float = TensorProto {
            dtype: DataType::DtFloat as i32,
            tensor_content: 7f32.to_le_bytes().to_vec().into(),
            ..Default::default()
        };
        assert_eq!(scalar_value(body(float, false), 4096), None);
        let mut short = int64(5, &[]);
        short.tensor_content = Bytes::from_static(&[5, 0, 0, 0]);
        assert_eq!(scalar_value(body(short, false), 4096), None);
        assert_eq!(
            scalar_value(Bytes::from_static(b"\0\0\0\0\x02hi"), 4096),
            None
        );
        assert_eq!(
            scalar_value(body(int64(99, &[]), false), 8),
            None,
            "over the limit"
        );
    }
}
