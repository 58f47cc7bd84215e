//! The `RecvTensor` response on the wire: which responses tlc may compress,
//! and how to write one that TensorFlow reads on its fast path.
//!
//! # What TensorFlow sends
//!
//! `grpc::EncodeTensorToByteBuffer`
//! (`tensorflow/core/distributed_runtime/rpc/grpc_tensor_coding.cc`) writes a
//! `RecvTensorResponse` by hand for every type it can memcpy:
//!
//! 1. the response without its tensor, as protobuf serializes it: `is_dead`
//!    (2, only when true), `send_start_micros` (3), `transport_options` (4),
//!    `require_ack` (5, only when true), in field order;
//! 2. `tensor` (1) last, holding `dtype` (1), `tensor_shape` (2, one `dim`
//!    with only `size` per dimension, and left out entirely for a scalar) and
//!    `tensor_content` (4), in that order; beyond 1 KiB the content is a
//!    separate gRPC slice pointing at the tensor's memory.
//!
//! Other types (strings, resources, variants) go through
//! `Tensor::AsProtoTensorContent` and the generic serializer.
//!
//! # What TensorFlow reads fast
//!
//! `TensorResponse::ParseFast`
//! (`tensorflow/core/distributed_runtime/tensor_coding.cc`) reads the
//! response fields 1–5 in any order and, inside the tensor, only `dtype`
//! (a memcpy-able type), `tensor_shape`, `version_number`, and one
//! `tensor_content` that comes after a `tensor_shape` and holds exactly
//! elements × type size bytes. Anything else makes it fall back to
//! `ParseSlow`, a full protobuf parse plus a copy. The responses written here
//! follow TF's own layout (above), with one difference: a scalar gets an
//! empty `tensor_shape`, because without one `ParseFast` refuses the content.
//! [`super::fast_parse`] checks that rule on any message.
//!
//! Some layouts TF neither reads nor refuses: it aborts the receiving process
//! (a tensor without `dtype` before its content, a negative dimension, more
//! than 254 dimensions; see [`super::fast_parse::Abort`]). The builders here
//! always write `dtype` first and refuse shapes TF cannot hold, and every
//! response they write is checked against TF 2.21 itself by the fixtures in
//! `wire/tests/fixtures/tf/`.

use bytes::{BufMut, Bytes};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;

use super::grpc::{self, FrameError};
use super::proto::{Any, DataType, RecvTensorResponse, TensorProto, MAX_DIMS};

/// gRPC path of the call that moves tensors between tasks (checked in
/// `grpc_worker_service_impl.cc` and in the TF 2.21 library).
pub const RECV_TENSOR_PATH: &str = "/tensorflow.WorkerService/RecvTensor";

/// Size of one `DT_FLOAT` element.
const F32_SIZE: u64 = 4;

/// Field numbers of `RecvTensorResponse`.
mod response_field {
    pub const TENSOR: u32 = 1;
    pub const IS_DEAD: u32 = 2;
    pub const SEND_START_MICROS: u32 = 3;
    pub const TRANSPORT_OPTIONS: u32 = 4;
    pub const REQUIRE_ACK: u32 = 5;
}

/// Field numbers of `TensorProto`, `TensorShapeProto` and its `Dim`.
mod tensor_field {
    pub const DTYPE: u32 = 1;
    pub const TENSOR_SHAPE: u32 = 2;
    pub const TENSOR_CONTENT: u32 = 4;
    pub const SHAPE_DIM: u32 = 2;
    pub const DIM_SIZE: u32 = 1;
}

/// Decodes a `RecvTensorResponse` message (the gRPC payload, without its
/// prefix). Pass the `Bytes` itself, not a slice of it: `tensor_content` is
/// then a view into `message`, not a copy.
pub fn decode_response(message: Bytes) -> Result<RecvTensorResponse, prost::DecodeError> {
    RecvTensorResponse::decode(message)
}

/// Everything in a `RecvTensorResponse` besides the tensor. tlc carries it
/// unchanged to the response it hands back to TensorFlow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseMeta {
    /// The tensor is dead.
    pub is_dead: bool,
    /// When the sender started sending, in microseconds.
    pub send_start_micros: i64,
    /// Transport options, kept present-but-empty if they were.
    pub transport_options: Option<Any>,
    /// The receiver must acknowledge.
    pub require_ack: bool,
}

impl ResponseMeta {
    /// The non-tensor fields of `response`.
    pub fn of(response: &RecvTensorResponse) -> Self {
        Self {
            is_dead: response.is_dead,
            send_start_micros: response.send_start_micros,
            transport_options: response.transport_options.clone(),
            require_ack: response.require_ack,
        }
    }
}

/// A `DT_FLOAT` tensor in a `RecvTensorResponse` that tlc may compress: its
/// shape, its raw values, and the rest of the response.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatTensor {
    /// The response's other fields.
    pub meta: ResponseMeta,
    /// Dimension sizes, outermost first; empty for a scalar.
    pub dims: Vec<u64>,
    /// `element_count() * 4` bytes: the values as `f32` in little-endian
    /// order, shared with the buffer the response was decoded from.
    pub content: Bytes,
}

impl FloatTensor {
    /// Number of values.
    pub fn element_count(&self) -> u64 {
        // `classify` and the builders only accept dims whose product fits.
        element_count(&self.dims).unwrap_or(0)
    }

    /// The values, decoded from `content`.
    pub fn values(&self) -> impl ExactSizeIterator<Item = f32> + '_ {
        self.content
            .chunks_exact(F32_SIZE as usize)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The standard response for this tensor; see
    /// [`build_standard_response`].
    pub fn to_response(&self) -> Result<EncodedResponse, BuildError> {
        build_standard_response(&self.meta, &self.dims, self.content.clone())
    }
}

/// Why a `RecvTensorResponse` is passed through as it is instead of being
/// compressed. None of these is an error: they are ordinary traffic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassReason {
    /// The tensor is dead.
    #[error("the tensor is dead")]
    Dead,
    /// The response has no `tensor` field.
    #[error("the response carries no tensor")]
    NoTensor,
    /// The element type is not `DT_FLOAT`.
    #[error("the tensor's dtype is {0}, not DT_FLOAT")]
    NotFloat(i32),
    /// The shape's rank is unknown.
    #[error("the tensor's shape has unknown rank")]
    UnknownRank,
    /// More dimensions than TensorFlow allows.
    #[error("the tensor has {0} dimensions; TensorFlow allows at most 254")]
    TooManyDims(usize),
    /// A dimension is negative (unknown).
    #[error("dimension {index} of the tensor has size {size}")]
    NegativeDim {
        /// Which dimension.
        index: usize,
        /// Its size.
        size: i64,
    },
    /// The element count overflows TensorFlow's `int64` at some
    /// dimension, or the byte size a `u64`.
    #[error("the tensor's element count overflows")]
    ShapeOverflow,
    /// The values are in `float_val` or another typed field, not in
    /// `tensor_content`.
    #[error("the tensor's values are in typed fields, not in tensor_content")]
    NoContent,
    /// `tensor_content` is not elements × 4 bytes.
    #[error("tensor_content has {actual} bytes; the shape needs {expected}")]
    SizeMismatch {
        /// Bytes the shape calls for.
        expected: u64,
        /// Bytes present.
        actual: usize,
    },
    /// The tensor sets fields tlc would not carry over (a `version_number`,
    /// dimension names, typed values besides `tensor_content`).
    #[error("the tensor has fields besides dtype, shape sizes and tensor_content")]
    ExtraFields,
}

impl PassReason {
    /// A short fixed label, for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Dead => "dead",
            Self::NoTensor => "no_tensor",
            Self::NotFloat(_) => "not_float",
            Self::UnknownRank => "unknown_rank",
            Self::TooManyDims(_) => "too_many_dims",
            Self::NegativeDim { .. } => "negative_dim",
            Self::ShapeOverflow => "shape_overflow",
            Self::NoContent => "no_content",
            Self::SizeMismatch { .. } => "size_mismatch",
            Self::ExtraFields => "extra_fields",
        }
    }
}

/// Decides whether the proxy may compress `response`: `Ok` with a view of
/// the float tensor, or the reason to pass the response through.
///
/// Accepted is exactly what [`build_standard_response`] rebuilds without
/// loss: a live `DT_FLOAT` tensor of known shape whose values are all in
/// `tensor_content`, and no other tensor fields set. Nothing is copied.
pub fn classify(response: &RecvTensorResponse) -> Result<FloatTensor, PassReason> {
    if response.is_dead {
        return Err(PassReason::Dead);
    }
    let tensor: &TensorProto = response.tensor.as_ref().ok_or(PassReason::NoTensor)?;
    if tensor.dtype != DataType::DtFloat as i32 {
        return Err(PassReason::NotFloat(tensor.dtype));
    }
    let mut dims = Vec::new();
    if let Some(shape) = &tensor.tensor_shape {
        if shape.unknown_rank {
            return Err(PassReason::UnknownRank);
        }
        if shape.dim.len() > MAX_DIMS {
            return Err(PassReason::TooManyDims(shape.dim.len()));
        }
        dims.reserve_exact(shape.dim.len());
        for (index, dim) in shape.dim.iter().enumerate() {
            let size = u64::try_from(dim.size).map_err(|_| PassReason::NegativeDim {
                index,
                size: dim.size,
            })?;
            if !dim.name.is_empty() {
                return Err(PassReason::ExtraFields);
            }
            dims.push(size);
        }
    }
    if tensor.has_typed_values() {
        return Err(if tensor.tensor_content.is_empty() {
            PassReason::NoContent
        } else {
            PassReason::ExtraFields
        });
    }
    if tensor.version_number != 0 {
        return Err(PassReason::ExtraFields);
    }
    let expected = float_bytes(&dims).ok_or(PassReason::ShapeOverflow)?;
    if expected != tensor.tensor_content.len() as u64 {
        return Err(PassReason::SizeMismatch {
            expected,
            actual: tensor.tensor_content.len(),
        });
    }
    Ok(FloatTensor {
        meta: ResponseMeta::of(response),
        dims,
        content: tensor.tensor_content.clone(),
    })
}

/// Why a response cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The content is not elements × 4 bytes.
    #[error("float content has {actual} bytes; the shape needs {expected}")]
    SizeMismatch {
        /// Bytes the shape calls for.
        expected: u64,
        /// Bytes given.
        actual: usize,
    },
    /// A dimension does not fit TF's `int64`.
    #[error("dimension size {0} does not fit an int64")]
    DimTooLarge(u64),
    /// More dimensions than TensorFlow allows (it would abort).
    #[error("{0} dimensions; TensorFlow allows at most 254")]
    TooManyDims(usize),
    /// The element count overflows TensorFlow's `int64` at some
    /// dimension (TF would abort), or the byte size a `u64`.
    #[error("the shape's element count overflows")]
    ShapeOverflow,
    /// The message would exceed what TF parses (`INT_MAX` bytes).
    #[error("the response would be {len} bytes; TensorFlow parses at most {limit}")]
    TooLarge {
        /// Size of the message.
        len: u64,
        /// The limit.
        limit: usize,
    },
}

/// A serialized `RecvTensorResponse` in two parts: every byte up to the
/// tensor content, then the content itself, untouched. Sent one after the
/// other (after a gRPC prefix, see [`EncodedResponse::into_grpc_chunks`]),
/// they form the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedResponse {
    /// The response fields, the tensor's tag and length, dtype, shape, and
    /// the tag and length of `tensor_content`.
    pub header: Bytes,
    /// The `tensor_content` bytes.
    pub content: Bytes,
}

impl EncodedResponse {
    /// Length of the whole message.
    pub fn len(&self) -> usize {
        self.header.len() + self.content.len()
    }

    /// Never true: a response has at least its tensor's header.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message in one buffer (copies the content; for tests and small
    /// messages).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.header);
        v.extend_from_slice(&self.content);
        v
    }

    /// The gRPC message as three chunks: 5-byte prefix, header, content.
    pub fn into_grpc_chunks(self) -> Result<[Bytes; 3], FrameError> {
        let prefix = grpc::prefix(self.len())?;
        Ok([Bytes::copy_from_slice(&prefix), self.header, self.content])
    }
}

/// Writes the `RecvTensorResponse` that tlc hands back to TensorFlow for a
/// float tensor of shape `dims` whose values are `content` (little-endian
/// `f32`, exactly elements × 4 bytes), with the other fields from `meta`.
///
/// The layout is TensorFlow's own (see the module documentation), which
/// `ParseFast` reads without falling back; `content` is not copied.
pub fn build_standard_response(
    meta: &ResponseMeta,
    dims: &[u64],
    content: Bytes,
) -> Result<EncodedResponse, BuildError> {
    let expected = float_bytes(dims).ok_or(BuildError::ShapeOverflow)?;
    if expected != content.len() as u64 {
        return Err(BuildError::SizeMismatch {
            expected,
            actual: content.len(),
        });
    }
    build_response_with_content(meta, dims, DataType::DtFloat as i32, content)
}

/// Writes a `RecvTensorResponse` in the same layout as
/// [`build_standard_response`], with any bytes as `tensor_content` and any
/// `dtype`, and no check of the content's length against the shape.
///
/// The hop between two sidecars uses it to carry a compressed frame in place
/// of the values: the message keeps the shape of a `RecvTensor` response.
pub fn build_response_with_content(
    meta: &ResponseMeta,
    dims: &[u64],
    dtype: i32,
    content: Bytes,
) -> Result<EncodedResponse, BuildError> {
    if dims.len() > MAX_DIMS {
        return Err(BuildError::TooManyDims(dims.len()));
    }
    if let Some(&big) = dims.iter().find(|&&d| d > i64::MAX as u64) {
        return Err(BuildError::DimTooLarge(big));
    }
    let key_len = |field: u32| encoded_len_varint(u64::from(field << 3));
    // Each dim: its tag, its length, and inside it the size field. TF writes
    // the size even when it is 0.
    let dim_body_len = |d: u64| key_len(tensor_field::DIM_SIZE) + encoded_len_varint(d);
    let shape_len: usize = dims
        .iter()
        .map(|&d| {
            let body = dim_body_len(d);
            key_len(tensor_field::SHAPE_DIM) + encoded_len_varint(body as u64) + body
        })
        .sum();
    let dtype_varint = dtype as i64 as u64;
    let content_len = content.len() as u64;
    let tensor_len = key_len(tensor_field::DTYPE) as u64
        + encoded_len_varint(dtype_varint) as u64
        + key_len(tensor_field::TENSOR_SHAPE) as u64
        + encoded_len_varint(shape_len as u64) as u64
        + shape_len as u64
        + key_len(tensor_field::TENSOR_CONTENT) as u64
        + encoded_len_varint(content_len) as u64
        + content_len;
    let meta_len = meta_encoded_len(meta);
    let total = meta_len as u64
        + key_len(response_field::TENSOR) as u64
        + encoded_len_varint(tensor_len) as u64
        + tensor_len;
    let limit = grpc::TF_MAX_MESSAGE_LEN;
    if total > limit as u64 {
        return Err(BuildError::TooLarge { len: total, limit });
    }

    let header_len = total - content_len;
    let mut h = Vec::with_capacity(usize::try_from(header_len).unwrap_or(0));
    // (A) the response fields except the tensor, in field order, as TF does.
    encode_meta(meta, &mut h);
    // (B) the tensor's tag and length.
    encode_key(response_field::TENSOR, WireType::LengthDelimited, &mut h);
    encode_varint(tensor_len, &mut h);
    // (C) dtype, then the shape: sizes only.
    encode_key(tensor_field::DTYPE, WireType::Varint, &mut h);
    encode_varint(dtype_varint, &mut h);
    encode_key(
        tensor_field::TENSOR_SHAPE,
        WireType::LengthDelimited,
        &mut h,
    );
    encode_varint(shape_len as u64, &mut h);
    for &d in dims {
        encode_key(tensor_field::SHAPE_DIM, WireType::LengthDelimited, &mut h);
        encode_varint(dim_body_len(d) as u64, &mut h);
        encode_key(tensor_field::DIM_SIZE, WireType::Varint, &mut h);
        encode_varint(d, &mut h);
    }
    // (D) the content's tag and length; (E), the content, stays apart.
    encode_key(
        tensor_field::TENSOR_CONTENT,
        WireType::LengthDelimited,
        &mut h,
    );
    encode_varint(content_len, &mut h);
    debug_assert_eq!(h.len() as u64, header_len);
    Ok(EncodedResponse {
        header: Bytes::from(h),
        content,
    })
}

/// Bytes of the response fields other than the tensor.
fn meta_encoded_len(meta: &ResponseMeta) -> usize {
    let mut n = 0;
    if meta.is_dead {
        n += 2;
    }
    if meta.send_start_micros != 0 {
        n += 1 + encoded_len_varint(meta.send_start_micros as u64);
    }
    if let Some(any) = &meta.transport_options {
        let len = any.encoded_len();
        n += 1 + encoded_len_varint(len as u64) + len;
    }
    if meta.require_ack {
        n += 2;
    }
    n
}

/// The response fields other than the tensor, as protobuf serializes them:
/// in field order, defaults left out.
fn encode_meta(meta: &ResponseMeta, buf: &mut impl BufMut) {
    if meta.is_dead {
        encode_key(response_field::IS_DEAD, WireType::Varint, buf);
        encode_varint(1, buf);
    }
    if meta.send_start_micros != 0 {
        encode_key(response_field::SEND_START_MICROS, WireType::Varint, buf);
        encode_varint(meta.send_start_micros as u64, buf);
    }
    if let Some(any) = &meta.transport_options {
        prost::encoding::message::encode(response_field::TRANSPORT_OPTIONS, any, buf);
    }
    if meta.require_ack {
        encode_key(response_field::REQUIRE_ACK, WireType::Varint, buf);
        encode_varint(1, buf);
    }
}

/// Product of the dimensions, as TensorFlow's `TensorShape` takes it:
/// `None` if the count so far exceeds `i64::MAX` at any dimension, on
/// which TF aborts the process, even where a later dimension of 0 would
/// make the product 0.
fn element_count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, &d| {
        n.checked_mul(d).filter(|&n| n <= i64::MAX as u64)
    })
}

/// Bytes of a float tensor of shape `dims`, if it fits a `u64`.
fn float_bytes(dims: &[u64]) -> Option<u64> {
    element_count(dims)?.checked_mul(F32_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tf::fast_parse;
    use crate::tf::proto::TensorShapeProto;

    fn f32_bytes(values: &[f32]) -> Bytes {
        values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()
    }

    fn float_response(dims: &[i64], content: Bytes) -> RecvTensorResponse {
        RecvTensorResponse {
            tensor: Some(TensorProto::shaped(DataType::DtFloat as i32, dims, content)),
            send_start_micros: 1_700_000_000_000_000,
            ..Default::default()
        }
    }

    /// The shape of a response built by `float_response`.
    fn shape_mut(r: &mut RecvTensorResponse) -> &mut TensorShapeProto {
        r.tensor.as_mut().unwrap().tensor_shape.as_mut().unwrap()
    }

    #[test]
    fn tiny_tensor_bytes_are_exactly_tfs_layout() {
        let meta = ResponseMeta {
            send_start_micros: 300,
            ..Default::default()
        };
        let enc = build_standard_response(&meta, &[2], f32_bytes(&[1.0, -2.0])).unwrap();
        #[rustfmt::skip]
        let header: &[u8] = &[
            0x18, 0xac, 0x02,       // send_start_micros (3) = 300
            0x0a, 0x12,             // tensor (1), 18 bytes
            0x08, 0x01,             //   dtype (1) = DT_FLOAT
            0x12, 0x04,             //   tensor_shape (2), 4 bytes
            0x12, 0x02, 0x08, 0x02, //     dim (2) { size (1) = 2 }
            0x22, 0x08,             //   tensor_content (4), 8 bytes
        ];
        assert_eq!(&enc.header[..], header);
        assert_eq!(&enc.content[..], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
        assert_eq!(enc.len(), header.len() + 8);
    }

    #[test]
    fn all_meta_fields_come_first_in_field_order() {
        let meta = ResponseMeta {
            is_dead: true,
            send_start_micros: 1,
            transport_options: Some(Any {
                type_url: "t".into(),
                value: Bytes::from_static(b"v"),
            }),
            require_ack: true,
        };
        let enc = build_response_with_content(&meta, &[], 1, Bytes::new()).unwrap();
        #[rustfmt::skip]
        let header: &[u8] = &[
            0x10, 0x01,                               // is_dead (2)
            0x18, 0x01,                               // send_start_micros (3)
            0x22, 0x06, 0x0a, 0x01, b't', 0x12, 0x01, b'v', // transport_options (4)
            0x28, 0x01,                               // require_ack (5)
            0x0a, 0x06,                               // tensor (1), 6 bytes
            0x08, 0x01,                               //   dtype
            0x12, 0x00,                               //   empty shape (scalar)
            0x22, 0x00,                               //   empty content
        ];
        assert_eq!(&enc.header[..], header);
    }

    #[test]
    fn build_then_decode_round_trips() {
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
        let content = f32_bytes(&values);
        let expected = float_response(&[10, 100], content.clone());
        let meta = ResponseMeta::of(&expected);
        let enc = build_standard_response(&meta, &[10, 100], content.clone()).unwrap();
        assert_eq!(enc.content.as_ptr(), content.as_ptr(), "content was copied");
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        assert_eq!(decoded, expected);
        let t = classify(&decoded).unwrap();
        assert_eq!(t.dims, vec![10, 100]);
        assert_eq!(t.meta, meta);
        assert_eq!(t.values().collect::<Vec<_>>(), values);
        // And the rebuilt message is the same bytes.
        assert_eq!(t.to_response().unwrap().to_vec(), enc.to_vec());
        fast_parse::check(&enc.to_vec()).unwrap();
    }

    #[test]
    fn big_dims_use_long_varints() {
        // 2^40 × 0 elements: the dims need 6-byte varints, the content is
        // empty; and a large real shape.
        let dims = [1u64 << 40, 0, 3];
        let enc = build_standard_response(&ResponseMeta::default(), &dims, Bytes::new()).unwrap();
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        let shape = decoded
            .tensor
            .as_ref()
            .unwrap()
            .tensor_shape
            .as_ref()
            .unwrap();
        let sizes: Vec<i64> = shape.dim.iter().map(|d| d.size).collect();
        assert_eq!(sizes, vec![1 << 40, 0, 3]);
        assert_eq!(classify(&decoded).unwrap().dims, dims.to_vec());
        fast_parse::check(&enc.to_vec()).unwrap();

        let dims = [3000u64, 700];
        let content = Bytes::from(vec![0u8; 3000 * 700 * 4]);
        let enc =
            build_standard_response(&ResponseMeta::default(), &dims, content.clone()).unwrap();
        // The tensor is 2 (dtype) + 12 (shape: two dims of 2-byte varints)
        // + 1 + 4 + 8_400_000 (content) = 8_400_019 bytes: a 4-byte varint.
        assert_eq!(&enc.header[1..5], &[0x93, 0xd9, 0x80, 0x04]);
        assert_eq!(enc.header[0], 0x0a);
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        assert_eq!(classify(&decoded).unwrap().dims, dims.to_vec());
        fast_parse::check(&enc.to_vec()).unwrap();
    }

    #[test]
    fn zero_element_tensor() {
        let enc = build_standard_response(&ResponseMeta::default(), &[0, 5], Bytes::new()).unwrap();
        assert_eq!(
            &enc.header[..],
            &[
                0x0a, 0x0e, 0x08, 0x01, 0x12, 0x08, 0x12, 0x02, 0x08, 0x00, 0x12, 0x02, 0x08, 0x05,
                0x22, 0x00
            ]
        );
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        let t = classify(&decoded).unwrap();
        assert_eq!(t.element_count(), 0);
        assert_eq!(t.values().count(), 0);
        fast_parse::check(&enc.to_vec()).unwrap();
    }

    #[test]
    fn scalar_gets_an_empty_shape_so_parse_fast_takes_it() {
        let enc =
            build_standard_response(&ResponseMeta::default(), &[], f32_bytes(&[3.5])).unwrap();
        assert_eq!(
            &enc.header[..],
            &[0x0a, 0x0a, 0x08, 0x01, 0x12, 0x00, 0x22, 0x04]
        );
        fast_parse::check(&enc.to_vec()).unwrap();
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        assert_eq!(
            classify(&decoded).unwrap().values().collect::<Vec<_>>(),
            vec![3.5]
        );
    }

    #[test]
    fn is_dead_and_require_ack_and_transport_options_are_preserved() {
        let any = Any {
            type_url: "type.googleapis.com/tensorflow.Example".into(),
            value: Bytes::from_static(&[1, 2, 3, 0, 255]),
        };
        for meta in [
            ResponseMeta {
                is_dead: true,
                ..Default::default()
            },
            ResponseMeta {
                require_ack: true,
                send_start_micros: -5,
                ..Default::default()
            },
            ResponseMeta {
                transport_options: Some(any.clone()),
                send_start_micros: i64::MAX,
                ..Default::default()
            },
            ResponseMeta {
                // Present but empty stays present.
                transport_options: Some(Any::default()),
                ..Default::default()
            },
        ] {
            let enc = build_standard_response(&meta, &[1], f32_bytes(&[1.0])).unwrap();
            let wire = enc.to_vec();
            fast_parse::check(&wire).unwrap();
            let decoded = decode_response(Bytes::from(wire)).unwrap();
            assert_eq!(ResponseMeta::of(&decoded), meta);
        }
    }

    #[test]
    fn envelope_content_of_any_length_and_dtype() {
        let meta = ResponseMeta {
            send_start_micros: 9,
            ..Default::default()
        };
        let envelope = Bytes::from_static(b"TLC\x01 compressed frame");
        let enc = build_response_with_content(
            &meta,
            &[1000, 10],
            DataType::DtFloat as i32,
            envelope.clone(),
        )
        .unwrap();
        assert_eq!(enc.content, envelope);
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        let tensor = decoded.tensor.as_ref().unwrap();
        assert_eq!(tensor.tensor_content, envelope);
        assert_eq!(tensor.tensor_shape.as_ref().unwrap().dim.len(), 2);
        assert_eq!(ResponseMeta::of(&decoded), meta);
        // Its length does not match the shape, so it is not a float tensor.
        assert_eq!(
            classify(&decoded),
            Err(PassReason::SizeMismatch {
                expected: 40_000,
                actual: envelope.len()
            })
        );
        // Another dtype is written as given.
        let enc = build_response_with_content(&meta, &[2], DataType::DtInt64 as i32, Bytes::new())
            .unwrap();
        let decoded = decode_response(Bytes::from(enc.to_vec())).unwrap();
        assert_eq!(decoded.tensor.unwrap().dtype, DataType::DtInt64 as i32);
    }

    #[test]
    fn builder_refuses_bad_input() {
        let meta = ResponseMeta::default();
        assert_eq!(
            build_standard_response(&meta, &[3], Bytes::from_static(&[0; 8])),
            Err(BuildError::SizeMismatch {
                expected: 12,
                actual: 8
            })
        );
        assert_eq!(
            build_standard_response(&meta, &[u64::MAX, 2], Bytes::new()),
            Err(BuildError::ShapeOverflow)
        );
        assert_eq!(
            build_response_with_content(&meta, &[1 << 63], 1, Bytes::new()),
            Err(BuildError::DimTooLarge(1 << 63))
        );
        assert!(build_standard_response(&meta, &[1 << 40, 0], Bytes::new()).is_ok());
        assert_eq!(
            build_standard_response(&meta, &[1; 255], Bytes::from_static(&[0; 4])),
            Err(BuildError::TooManyDims(255))
        );
        assert!(build_standard_response(&meta, &[1; 254], Bytes::from_static(&[0; 4])).is_ok());
    }

    /// Found by the `recv_tensor_response` fuzz target (shape
    /// `[i64::MAX, 2, 0]`, no content): the element count overflows TF's
    /// int64 before the 0 makes it 0, and TF aborts the receiving process
    /// on such a shape (`fast_parse::Abort::TooManyElements`). It was
    /// classified as an empty float tensor, and a peer's envelope declaring
    /// it was restored into a response for TensorFlow.
    #[test]
    fn a_shape_whose_count_overflows_before_a_zero_is_refused() {
        let meta = ResponseMeta::default();
        for dims in [[i64::MAX, 2, 0], [1 << 32, 1 << 31, 0]] {
            let r = float_response(&dims, Bytes::new());
            assert_eq!(
                fast_parse::check(&r.encode_to_vec()),
                Err(fast_parse::NotFast::Aborts(
                    fast_parse::Abort::TooManyElements
                ))
            );
            assert_eq!(classify(&r), Err(PassReason::ShapeOverflow));
            let dims = dims.map(|d| d as u64);
            assert_eq!(
                build_standard_response(&meta, &dims, Bytes::new()),
                Err(BuildError::ShapeOverflow)
            );
        }
        // Up to i64::MAX before the zero is a shape TF holds.
        let r = float_response(&[1 << 62, 1, 0], Bytes::new());
        assert_eq!(classify(&r).unwrap().element_count(), 0);
        let built = build_standard_response(&meta, &[i64::MAX as u64, 0], Bytes::new()).unwrap();
        fast_parse::check(&built.to_vec()).unwrap();
    }

    #[test]
    fn into_grpc_chunks_prefixes_the_whole_length() {
        let enc =
            build_standard_response(&ResponseMeta::default(), &[1], f32_bytes(&[2.0])).unwrap();
        let len = enc.len();
        let [prefix, header, content] = enc.into_grpc_chunks().unwrap();
        let mut body = prefix.to_vec();
        body.extend_from_slice(&header);
        body.extend_from_slice(&content);
        let msg = grpc::parse_single(Bytes::from(body), grpc::TF_MAX_MESSAGE_LEN).unwrap();
        assert_eq!(msg.len(), len);
    }

    #[test]
    fn classify_reasons() {
        let ok = float_response(&[2], f32_bytes(&[1.0, 2.0]));
        assert!(classify(&ok).is_ok());

        let mut r = ok.clone();
        r.is_dead = true;
        assert_eq!(classify(&r), Err(PassReason::Dead));

        let mut r = ok.clone();
        r.tensor = None;
        assert_eq!(classify(&r), Err(PassReason::NoTensor));

        let mut r = ok.clone();
        r.tensor.as_mut().unwrap().dtype = DataType::DtHalf as i32;
        assert_eq!(classify(&r), Err(PassReason::NotFloat(19)));

        let mut r = ok.clone();
        shape_mut(&mut r).unknown_rank = true;
        assert_eq!(classify(&r), Err(PassReason::UnknownRank));

        let mut r = float_response(&[1; 255], f32_bytes(&[1.0]));
        assert_eq!(classify(&r), Err(PassReason::TooManyDims(255)));
        shape_mut(&mut r).dim.pop();
        assert!(classify(&r).is_ok());

        let mut r = ok.clone();
        shape_mut(&mut r).dim[0].size = -1;
        assert_eq!(
            classify(&r),
            Err(PassReason::NegativeDim { index: 0, size: -1 })
        );

        let mut r = ok.clone();
        shape_mut(&mut r).dim[0].name = "batch".into();
        assert_eq!(classify(&r), Err(PassReason::ExtraFields));

        let mut r = ok.clone();
        r.tensor.as_mut().unwrap().version_number = 1;
        assert_eq!(classify(&r), Err(PassReason::ExtraFields));

        let mut r = float_response(&[2], Bytes::new());
        r.tensor.as_mut().unwrap().float_val = vec![1.0, 2.0];
        assert_eq!(classify(&r), Err(PassReason::NoContent));

        let mut r = ok.clone();
        r.tensor.as_mut().unwrap().float_val = vec![1.0];
        assert_eq!(classify(&r), Err(PassReason::ExtraFields));

        let r = float_response(&[3], f32_bytes(&[1.0, 2.0]));
        assert_eq!(
            classify(&r),
            Err(PassReason::SizeMismatch {
                expected: 12,
                actual: 8
            })
        );

        let r = float_response(&[i64::MAX, i64::MAX], Bytes::new());
        assert_eq!(classify(&r), Err(PassReason::ShapeOverflow));

        // A scalar with no shape field at all, as TF sends it.
        let mut r = float_response(&[], f32_bytes(&[4.0]));
        r.tensor.as_mut().unwrap().tensor_shape = None;
        assert_eq!(classify(&r).unwrap().dims, Vec::<u64>::new());
    }

    #[test]
    fn classify_shares_the_content() {
        let wire =
            Bytes::from(float_response(&[256], Bytes::from(vec![1u8; 1024])).encode_to_vec());
        let decoded = decode_response(wire.clone()).unwrap();
        let t = classify(&decoded).unwrap();
        assert!(wire.as_ptr_range().contains(&t.content.as_ptr()));
    }

    #[test]
    fn labels_are_distinct() {
        let reasons = [
            PassReason::Dead,
            PassReason::NoTensor,
            PassReason::NotFloat(0),
            PassReason::UnknownRank,
            PassReason::TooManyDims(255),
            PassReason::NegativeDim { index: 0, size: -1 },
            PassReason::ShapeOverflow,
            PassReason::NoContent,
            PassReason::SizeMismatch {
                expected: 0,
                actual: 0,
            },
            PassReason::ExtraFields,
        ];
        let mut labels: Vec<_> = reasons.iter().map(PassReason::label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), reasons.len());
    }

    #[test]
    fn every_built_response_takes_the_fast_path_and_round_trips() {
        // A deterministic sweep over ranks, sizes (0, small, multi-byte
        // varints) and meta fields.
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..300 {
            let rank = (next() % 5) as usize;
            let dims: Vec<u64> = (0..rank)
                .map(|_| match next() % 6 {
                    0 => 0,
                    1 => 1,
                    2 => u64::from(next() % 200),
                    _ => u64::from(next() % 9) + 1,
                })
                .collect();
            let n: u64 = dims.iter().product();
            if n > 1 << 16 {
                continue;
            }
            let content: Bytes = (0..n * 4).map(|i| (i as u8) ^ (next() as u8)).collect();
            let meta = ResponseMeta {
                is_dead: next() % 4 == 0,
                send_start_micros: i64::from(next() as i32) * i64::from(next() % 3),
                transport_options: (next() % 3 == 0).then(|| Any {
                    type_url: "t".repeat((next() % 200) as usize),
                    value: Bytes::from(vec![7; (next() % 300) as usize]),
                }),
                require_ack: next() % 2 == 0,
            };
            let enc = build_standard_response(&meta, &dims, content.clone()).unwrap();
            let wire = enc.to_vec();
            let parsed = fast_parse::check(&wire).unwrap();
            assert_eq!(parsed.dims, dims);
            assert_eq!(parsed.content_len, Some(n * 4));
            let decoded = decode_response(Bytes::from(wire)).unwrap();
            assert_eq!(ResponseMeta::of(&decoded), meta);
            if !meta.is_dead {
                let t = classify(&decoded).unwrap();
                assert_eq!((t.dims, t.content), (dims, content));
            }
        }
    }
}
