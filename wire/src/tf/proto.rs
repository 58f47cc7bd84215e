//! TensorFlow's protobuf messages for `RecvTensor`, written by hand with
//! `prost` (no `protoc`, no build script).
//!
//! Field numbers and types follow TensorFlow 2.21: `worker.proto`
//! (`RecvTensorRequest`, `RecvTensorResponse`), `framework/tensor.proto`,
//! `framework/tensor_shape.proto`, `framework/types.proto`,
//! `framework/device_attributes.proto` (`DeviceLocality`), and
//! `google/protobuf/any.proto`. They were checked against the descriptors in
//! the `tensorflow` 2.21 wheel (`tensor_pb2`, `types_pb2`, ...) and the
//! `worker.pb.h` it ships.
//!
//! Every field of these messages is declared, so decoding and re-encoding
//! loses nothing that TF 2.21 sends (prost drops unknown fields). Two deeply
//! nested message types that tlc never looks into, `ResourceHandleProto` and
//! `VariantTensorDataProto`, are kept as their serialized bytes: a
//! length-delimited message field and a `bytes` field are the same on the
//! wire, so they round-trip byte for byte.
//!
//! Byte fields are [`bytes::Bytes`]: decoding a message from a `Bytes` buffer
//! slices `tensor_content` out of that buffer instead of copying it.

use bytes::Bytes;

/// `tensorflow.RecvTensorRequest`: a task asks the holder of a tensor for it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RecvTensorRequest {
    /// The step the tensor belongs to.
    #[prost(int64, tag = "1")]
    pub step_id: i64,
    /// Names the tensor; see [`super::rendezvous`].
    #[prost(string, tag = "2")]
    pub rendezvous_key: String,
    /// Whether the client accepts the tensor by DMA (RDMA transports).
    #[prost(bool, tag = "3")]
    pub dma_ok: bool,
    /// Locality of the requesting device.
    #[prost(message, optional, tag = "4")]
    pub client_locality: Option<DeviceLocality>,
    /// Locality of the device holding the tensor.
    #[prost(message, optional, tag = "5")]
    pub server_locality: Option<DeviceLocality>,
    /// Transport-specific options.
    #[prost(message, optional, tag = "6")]
    pub transport_options: Option<Any>,
    /// Unique id of this request, for retries.
    #[prost(int64, tag = "7")]
    pub request_id: i64,
}

/// `tensorflow.RecvTensorResponse`: the tensor, travelling back to the task
/// that asked for it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RecvTensorResponse {
    /// The tensor, with its values usually in `tensor_content`.
    #[prost(message, optional, tag = "1")]
    pub tensor: Option<TensorProto>,
    /// The tensor is dead (an untaken branch of a `tf.cond`).
    #[prost(bool, tag = "2")]
    pub is_dead: bool,
    /// When the sender started sending, in microseconds (for tracing).
    #[prost(int64, tag = "3")]
    pub send_start_micros: i64,
    /// Transport-specific options.
    #[prost(message, optional, tag = "4")]
    pub transport_options: Option<Any>,
    /// The receiver must acknowledge (`MarkRecvFinished`).
    #[prost(bool, tag = "5")]
    pub require_ack: bool,
}

/// `tensorflow.TensorProto`.
///
/// Only one representation of the values is normally set: the raw
/// `tensor_content` (what TF's RPC layer uses for every type it can memcpy)
/// or one of the typed `*_val` fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Element type, a [`DataType`] value.
    #[prost(enumeration = "DataType", tag = "1")]
    pub dtype: i32,
    /// Shape.
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// Version of the typed-field convention (0: a single value fills the
    /// shape).
    #[prost(int32, tag = "3")]
    pub version_number: i32,
    /// The values as raw bytes in host order (little-endian on the machines
    /// TF runs on), row-major.
    #[prost(bytes = "bytes", tag = "4")]
    pub tensor_content: Bytes,
    /// `DT_HALF` and `DT_BFLOAT16` values, one per `int32`.
    #[prost(int32, repeated, tag = "13")]
    pub half_val: Vec<i32>,
    /// `DT_FLOAT` values.
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    /// `DT_DOUBLE` values.
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    /// `DT_INT32`, `DT_INT16`, `DT_UINT16`, `DT_INT8`, `DT_UINT8` values.
    #[prost(int32, repeated, tag = "7")]
    pub int_val: Vec<i32>,
    /// `DT_STRING` values.
    #[prost(bytes = "bytes", repeated, tag = "8")]
    pub string_val: Vec<Bytes>,
    /// `DT_COMPLEX64` values, real and imaginary parts interleaved.
    #[prost(float, repeated, tag = "9")]
    pub scomplex_val: Vec<f32>,
    /// `DT_INT64` values.
    #[prost(int64, repeated, tag = "10")]
    pub int64_val: Vec<i64>,
    /// `DT_BOOL` values.
    #[prost(bool, repeated, tag = "11")]
    pub bool_val: Vec<bool>,
    /// `DT_COMPLEX128` values, real and imaginary parts interleaved.
    #[prost(double, repeated, tag = "12")]
    pub dcomplex_val: Vec<f64>,
    /// `DT_RESOURCE` values: serialized `tensorflow.ResourceHandleProto`s,
    /// kept opaque.
    #[prost(bytes = "bytes", repeated, tag = "14")]
    pub resource_handle_val: Vec<Bytes>,
    /// `DT_VARIANT` values: serialized `tensorflow.VariantTensorDataProto`s,
    /// kept opaque.
    #[prost(bytes = "bytes", repeated, tag = "15")]
    pub variant_val: Vec<Bytes>,
    /// `DT_UINT32` values.
    #[prost(uint32, repeated, tag = "16")]
    pub uint32_val: Vec<u32>,
    /// `DT_UINT64` values.
    #[prost(uint64, repeated, tag = "17")]
    pub uint64_val: Vec<u64>,
    /// 8-bit float values (`DT_FLOAT8_*`), one byte each.
    #[prost(bytes = "bytes", tag = "18")]
    pub float8_val: Bytes,
}

impl TensorProto {
    /// Whether any typed `*_val` field holds values.
    pub fn has_typed_values(&self) -> bool {
        !(self.half_val.is_empty()
            && self.float_val.is_empty()
            && self.double_val.is_empty()
            && self.int_val.is_empty()
            && self.string_val.is_empty()
            && self.scomplex_val.is_empty()
            && self.int64_val.is_empty()
            && self.bool_val.is_empty()
            && self.dcomplex_val.is_empty()
            && self.resource_handle_val.is_empty()
            && self.variant_val.is_empty()
            && self.uint32_val.is_empty()
            && self.uint64_val.is_empty()
            && self.float8_val.is_empty())
    }

    /// A tensor with `dtype`, dims of these sizes and `content`: what tests
    /// and the emulated job build.
    pub fn shaped(dtype: i32, dims: &[i64], content: bytes::Bytes) -> TensorProto {
        TensorProto {
            dtype,
            tensor_shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&size| Dim {
                        size,
                        name: String::new(),
                    })
                    .collect(),
                unknown_rank: false,
            }),
            tensor_content: content,
            ..Default::default()
        }
    }
}

/// Most dimensions a TensorFlow tensor has (`TensorShape::MaxDimensions()`).
/// TF aborts the process on a shape with more.
pub const MAX_DIMS: usize = 254;

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// Dimensions, outermost first. Empty for a scalar.
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    /// The rank is unknown (never so for a concrete tensor).
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `tensorflow.TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    /// Size; -1 means unknown (never so for a concrete tensor).
    #[prost(int64, tag = "1")]
    pub size: i64,
    /// Optional name, ignored by TF when it builds a tensor.
    #[prost(string, tag = "2")]
    pub name: String,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    /// Type of the packed message.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The packed message.
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// `tensorflow.DeviceLocality`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceLocality {
    /// Bus locality; 0 means none.
    #[prost(int32, tag = "1")]
    pub bus_id: i32,
    /// NUMA node.
    #[prost(int32, tag = "2")]
    pub numa_node: i32,
    /// Links to other devices.
    #[prost(message, optional, tag = "3")]
    pub links: Option<LocalLinks>,
}

/// `tensorflow.LocalLinks`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LocalLinks {
    /// The links.
    #[prost(message, repeated, tag = "1")]
    pub link: Vec<InterconnectLink>,
}

/// `tensorflow.InterconnectLink`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InterconnectLink {
    /// Peer device.
    #[prost(int32, tag = "1")]
    pub device_id: i32,
    /// Kind of link.
    #[prost(string, tag = "2")]
    pub r#type: String,
    /// Relative strength.
    #[prost(int32, tag = "3")]
    pub strength: i32,
}

/// `tensorflow.DataType` (TF 2.21, without the `*_REF` values, which never
/// appear in a `TensorProto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DataType {
    /// Not set.
    DtInvalid = 0,
    /// `f32`.
    DtFloat = 1,
    /// `f64`.
    DtDouble = 2,
    /// `i32`.
    DtInt32 = 3,
    /// `u8`.
    DtUint8 = 4,
    /// `i16`.
    DtInt16 = 5,
    /// `i8`.
    DtInt8 = 6,
    /// Byte strings.
    DtString = 7,
    /// Two `f32`.
    DtComplex64 = 8,
    /// `i64`.
    DtInt64 = 9,
    /// `bool`.
    DtBool = 10,
    /// Quantized `i8`.
    DtQint8 = 11,
    /// Quantized `u8`.
    DtQuint8 = 12,
    /// Quantized `i32`.
    DtQint32 = 13,
    /// `bfloat16`.
    DtBfloat16 = 14,
    /// Quantized `i16`.
    DtQint16 = 15,
    /// Quantized `u16`.
    DtQuint16 = 16,
    /// `u16`.
    DtUint16 = 17,
    /// Two `f64`.
    DtComplex128 = 18,
    /// IEEE `f16`.
    DtHalf = 19,
    /// Resource handle.
    DtResource = 20,
    /// Variant.
    DtVariant = 21,
    /// `u32`.
    DtUint32 = 22,
    /// `u64`.
    DtUint64 = 23,
    /// 8-bit float, e5m2.
    DtFloat8E5m2 = 24,
    /// 8-bit float, e4m3fn.
    DtFloat8E4m3fn = 25,
    /// 8-bit float, e4m3fnuz.
    DtFloat8E4m3fnuz = 26,
    /// 8-bit float, e4m3b11fnuz.
    DtFloat8E4m3b11fnuz = 27,
    /// 8-bit float, e5m2fnuz.
    DtFloat8E5m2fnuz = 28,
    /// 4-bit signed integer.
    DtInt4 = 29,
    /// 4-bit unsigned integer.
    DtUint4 = 30,
    /// 2-bit signed integer.
    DtInt2 = 31,
    /// 2-bit unsigned integer.
    DtUint2 = 32,
    /// 4-bit float, e2m1fn.
    DtFloat4E2m1fn = 33,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn tensor_content_is_not_copied_when_decoding_from_bytes() {
        let tensor = TensorProto {
            dtype: DataType::DtFloat as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![Dim {
                    size: 256,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            tensor_content: Bytes::from(vec![7u8; 1024]),
            ..Default::default()
        };
        let response = RecvTensorResponse {
            tensor: Some(tensor),
            send_start_micros: 5,
            ..Default::default()
        };
        let wire = Bytes::from(response.encode_to_vec());
        let decoded = RecvTensorResponse::decode(wire.clone()).unwrap();
        assert_eq!(decoded, response);
        let content = &decoded.tensor.as_ref().unwrap().tensor_content;
        let range = wire.as_ptr_range();
        assert!(
            range.contains(&content.as_ptr()),
            "tensor_content was copied"
        );
    }

    #[test]
    fn request_round_trips_with_localities() {
        let request = RecvTensorRequest {
            step_id: -3,
            rendezvous_key: "a;1;b;edge_1_x;0:0".into(),
            dma_ok: true,
            client_locality: Some(DeviceLocality {
                bus_id: 1,
                numa_node: 0,
                links: Some(LocalLinks {
                    link: vec![InterconnectLink {
                        device_id: 2,
                        r#type: "StreamExecutor".into(),
                        strength: 3,
                    }],
                }),
            }),
            // Present but empty must stay present.
            server_locality: Some(DeviceLocality::default()),
            transport_options: Some(Any {
                type_url: "type.googleapis.com/x".into(),
                value: Bytes::from_static(b"\x08\x01"),
            }),
            request_id: 1 << 40,
        };
        let wire = request.encode_to_vec();
        let decoded = RecvTensorRequest::decode(&wire[..]).unwrap();
        assert_eq!(decoded, request);
        assert_eq!(decoded.encode_to_vec(), wire);
    }

    #[test]
    fn opaque_message_fields_round_trip_byte_for_byte() {
        // A ResourceHandleProto { device = "/cpu:0" (2), container = "c" (3) }.
        let handle = Bytes::from_static(b"\x12\x06/cpu:0\x1a\x01c");
        let tensor = TensorProto {
            dtype: DataType::DtResource as i32,
            resource_handle_val: vec![handle.clone()],
            ..Default::default()
        };
        let wire = tensor.encode_to_vec();
        // Field 14, length-delimited: key (14 << 3 | 2) = 0x72.
        assert_eq!(&wire[..4], b"\x08\x14\x72\x0b");
        let decoded = TensorProto::decode(&wire[..]).unwrap();
        assert_eq!(decoded.resource_handle_val, vec![handle]);
        assert_eq!(decoded.encode_to_vec(), wire);
    }

    #[test]
    fn typed_values_are_detected() {
        let mut t = TensorProto::default();
        assert!(!t.has_typed_values());
        t.float_val.push(1.0);
        assert!(t.has_typed_values());
        let t = TensorProto {
            float8_val: Bytes::from_static(b"\x01"),
            ..Default::default()
        };
        assert!(t.has_typed_values());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for junk in [
            &b"\xff"[..],
            b"\x0a\xff\xff\xff\xff\x0f",
            b"\x0a\x05\x08",
            b"\x22\x80",
        ] {
            let _ = RecvTensorResponse::decode(junk);
            let _ = RecvTensorRequest::decode(junk);
        }
        assert!(RecvTensorResponse::decode(&b"\x0a\x05\x08"[..]).is_err());
    }
}
