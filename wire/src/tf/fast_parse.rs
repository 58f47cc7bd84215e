//! TensorFlow's fast-path rule for `RecvTensorResponse`, restated so tlc can
//! check a message against it.
//!
//! A receiving task on a CPU device parses every `RecvTensor` response with
//! `TensorResponse::ParseFast`
//! (`tensorflow/core/distributed_runtime/tensor_coding.cc`) and only falls
//! back to `ParseSlow` (a full protobuf parse plus a copy of the content)
//! when it refuses the message. [`check`] accepts a message exactly when that
//! function would, except that it is stricter in two corners TF tolerates: a
//! literal zero tag (TF stops there and ignores the rest) and a message that
//! ends inside a field.
//!
//! ParseFast reads, at the top level, fields 1–5 (`tensor`, `is_dead`,
//! `send_start_micros`, `transport_options`, `require_ack`) in any order with
//! the right wire types; inside the tensor only `dtype` (1, a type TF can
//! memcpy), `tensor_shape` (2), `version_number` (3) and a single
//! `tensor_content` (4), which must follow a `tensor_shape`, be followed by
//! nothing but the end of the tensor, and hold exactly elements × type size
//! bytes. Any other field number makes it give up.
//!
//! Some messages it does not refuse but dies on ([`NotFast::Aborts`]): a
//! tensor without a dtype by the time its content (or its end) is read, a
//! negative dimension, an element count or a rank TF cannot hold. So a
//! canonical protobuf encoding of a tensor with `dtype` 0, or one with
//! `tensor_content` before `dtype`, kills the receiving task; only responses
//! TF or tlc's builder wrote may reach it.
//!
//! tlc uses this in tests to prove that what it hands to TensorFlow takes
//! the fast path, and to tell whether captured TF traffic did.

use prost::Message;

use super::proto::{Any, DataType, TensorShapeProto, MAX_DIMS};

/// Why TensorFlow's fast parser would refuse a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFast {
    /// A varint, tag or length runs past the end of its message.
    #[error("the message ends inside a field")]
    Truncated,
    /// A literal zero tag, or a tag above 127 (field numbers above 15).
    #[error("tag {0} is zero or above the fast parser's cutoff of 127")]
    TagOutOfRange(u64),
    /// A field the fast parser does not handle, or one with the wrong wire
    /// type.
    #[error("field {field} with wire type {wire_type} {place} is not read by the fast parser")]
    UnexpectedField {
        /// Field number.
        field: u64,
        /// Wire type.
        wire_type: u64,
        /// `"in the response"` or `"in the tensor"`.
        place: &'static str,
    },
    /// A length above `INT_MAX`.
    #[error("a length of {0} bytes is above INT_MAX")]
    LengthTooLarge(u64),
    /// A nested message (shape, transport options) does not parse.
    #[error("the nested {0} does not parse")]
    BadNested(&'static str),
    /// A dtype TF cannot memcpy (strings, resources, variants, invalid).
    #[error("dtype {0} cannot be memcpy'd")]
    NotMemcpy(u64),
    /// `tensor_content` before any `tensor_shape`.
    #[error("tensor_content comes before tensor_shape")]
    ContentBeforeShape,
    /// TensorFlow would not refuse this message: it would abort the whole
    /// process. Such a message must never reach TensorFlow.
    #[error("TensorFlow would abort the process: {0}")]
    Aborts(Abort),
    /// A tensor field after `tensor_content`.
    #[error("field {0} of the tensor comes after tensor_content")]
    FieldAfterContent(u64),
    /// `tensor_content` is not elements × type size bytes.
    #[error("tensor_content has {actual} bytes; dtype and shape need {expected}")]
    ContentSize {
        /// Bytes the shape calls for.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
}

/// A message on which TensorFlow 2.21's fast parser fails a `CHECK` and
/// aborts the process, instead of refusing the message. It builds a
/// `TensorShape` and then a `Tensor` from what it has read when it reaches
/// `tensor_content`, or the end of a tensor that has none; each of these is
/// fatal there (observed with `tf_wire_oracle`, see the fixtures' README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Abort {
    /// No `dtype` field before that point (a canonical protobuf encoder
    /// leaves out a `dtype` of 0): "Type not set" in `tensor.cc`. An explicit
    /// `dtype` of 0 is refused instead.
    #[error("the tensor has no dtype")]
    MissingDtype,
    /// A negative dimension: "Check failed: size >= 0" in `tensor_shape.cc`.
    #[error("a dimension is negative")]
    NegativeDim,
    /// More than `i64::MAX` elements: "Check failed: 0 <= new_num_elements".
    #[error("the element count overflows int64")]
    TooManyElements,
    /// More than 254 dimensions: "Too many dimensions in tensor".
    #[error("more than 254 dimensions")]
    TooManyDims,
}

/// What the fast parser reads from an accepted message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FastParsed {
    /// Whether a `tensor` field was present.
    pub has_tensor: bool,
    /// The tensor's dtype (0 if absent).
    pub dtype: i32,
    /// The tensor's dims (empty for a scalar or no shape).
    pub dims: Vec<u64>,
    /// Length of `tensor_content`, if present.
    pub content_len: Option<u64>,
}

/// Checks `message` (a serialized `RecvTensorResponse`, without gRPC prefix)
/// against TensorFlow's fast-path rule.
pub fn check(message: &[u8]) -> Result<FastParsed, NotFast> {
    let mut r = Reader::new(message);
    let mut out = FastParsed::default();
    while !r.at_end() {
        let (field, wire_type) = r.tag()?;
        match (field, wire_type) {
            (1, LEN) => {
                let body = r.length_delimited()?;
                out.has_tensor = true;
                check_tensor(body, &mut out)?;
            }
            (2, VARINT) | (3, VARINT) | (5, VARINT) => {
                r.varint()?;
            }
            (4, LEN) => {
                let body = r.length_delimited()?;
                Any::decode(body).map_err(|_| NotFast::BadNested("transport_options"))?;
            }
            _ => {
                return Err(NotFast::UnexpectedField {
                    field,
                    wire_type,
                    place: "in the response",
                })
            }
        }
    }
    Ok(out)
}

/// `ParseTensorSubmessage`. Like TF, a second `tensor` field starts afresh
/// except for the dtype and shape it merges into.
fn check_tensor(body: &[u8], out: &mut FastParsed) -> Result<(), NotFast> {
    let mut r = Reader::new(body);
    let mut shape: Option<TensorShapeProto> = None;
    let mut seen_content = false;
    while !r.at_end() {
        let (field, wire_type) = r.tag()?;
        if seen_content {
            // TF checks the wire type and reads the value first, but refuses
            // any field after the content either way.
            return Err(match (field, wire_type) {
                (1..=4, _) => NotFast::FieldAfterContent(field),
                _ => NotFast::UnexpectedField {
                    field,
                    wire_type,
                    place: "in the tensor",
                },
            });
        }
        match (field, wire_type) {
            (1, VARINT) => {
                // ReadVarint32 keeps the low 32 bits.
                let dtype = r.varint()? as u32;
                if dtype_size(dtype).is_none() {
                    return Err(NotFast::NotMemcpy(u64::from(dtype)));
                }
                out.dtype = dtype as i32;
            }
            (2, LEN) => {
                let bytes = r.length_delimited()?;
                let merged = shape.get_or_insert_with(TensorShapeProto::default);
                merged
                    .merge(bytes)
                    .map_err(|_| NotFast::BadNested("tensor_shape"))?;
            }
            (3, VARINT) => {
                r.varint()?;
            }
            (4, LEN) => {
                let shape = shape.as_ref().ok_or(NotFast::ContentBeforeShape)?;
                let content = r.length_delimited()?;
                seen_content = true;
                let (dims, elements) = tensor_shape(shape)?;
                let size =
                    dtype_size(out.dtype as u32).ok_or(NotFast::Aborts(Abort::MissingDtype))?;
                // At most i64::MAX × 16: a mismatch if it does not fit.
                let expected = elements.saturating_mul(size);
                let actual = content.len() as u64;
                if expected != actual {
                    return Err(NotFast::ContentSize { expected, actual });
                }
                out.dims = dims;
                out.content_len = Some(actual);
            }
            _ => {
                return Err(NotFast::UnexpectedField {
                    field,
                    wire_type,
                    place: "in the tensor",
                })
            }
        }
    }
    if !seen_content {
        // TF allocates an uninitialized tensor of the dtype and shape seen so
        // far (a scalar if there was no shape).
        let (dims, _) = tensor_shape(&shape.unwrap_or_default())?;
        if dtype_size(out.dtype as u32).is_none() {
            return Err(NotFast::Aborts(Abort::MissingDtype));
        }
        out.dims = dims;
    }
    Ok(())
}

/// TF's `TensorShape(const TensorShapeProto&)`: `unknown_rank` is ignored,
/// each dim is checked as it is added. Returns the dims and element count.
fn tensor_shape(shape: &TensorShapeProto) -> Result<(Vec<u64>, u64), NotFast> {
    let mut dims = Vec::with_capacity(shape.dim.len().min(MAX_DIMS));
    let mut elements: i64 = 1;
    for d in &shape.dim {
        if dims.len() >= MAX_DIMS {
            return Err(NotFast::Aborts(Abort::TooManyDims));
        }
        let size = u64::try_from(d.size).map_err(|_| NotFast::Aborts(Abort::NegativeDim))?;
        elements = elements
            .checked_mul(d.size)
            .ok_or(NotFast::Aborts(Abort::TooManyElements))?;
        dims.push(size);
    }
    // Non-negative: a product of non-negative factors that did not overflow.
    Ok((dims, elements as u64))
}

/// Element size of the types TF memcpys (`DataTypeCanUseMemcpy` in TF 2.21's
/// `types.h`); `None` for the others. The 4- and 2-bit types take a byte
/// each in a `Tensor`.
pub fn dtype_size(dtype: u32) -> Option<u64> {
    use DataType::*;
    let dt = DataType::try_from(i32::try_from(dtype).ok()?).ok()?;
    Some(match dt {
        DtBool | DtInt8 | DtUint8 | DtQint8 | DtQuint8 => 1,
        DtFloat8E5m2 | DtFloat8E4m3fn | DtFloat8E4m3fnuz | DtFloat8E4m3b11fnuz
        | DtFloat8E5m2fnuz | DtFloat4E2m1fn | DtInt4 | DtUint4 | DtInt2 | DtUint2 => 1,
        DtInt16 | DtUint16 | DtQint16 | DtQuint16 | DtBfloat16 | DtHalf => 2,
        DtFloat | DtInt32 | DtUint32 | DtQint32 => 4,
        DtDouble | DtInt64 | DtUint64 | DtComplex64 => 8,
        DtComplex128 => 16,
        DtInvalid | DtString | DtResource | DtVariant => return None,
    })
}

const VARINT: u64 = 0;
const LEN: u64 = 2;

/// A cursor over protobuf wire data.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn at_end(&self) -> bool {
        self.buf.is_empty()
    }

    fn varint(&mut self) -> Result<u64, NotFast> {
        let mut value = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self.buf.split_first().ok_or(NotFast::Truncated)?;
            self.buf = rest;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(NotFast::Truncated)
    }

    /// A tag, as `ReadTagWithCutoff(127)` takes it: 1..=127.
    fn tag(&mut self) -> Result<(u64, u64), NotFast> {
        let tag = self.varint()?;
        if tag == 0 || tag > 127 {
            return Err(NotFast::TagOutOfRange(tag));
        }
        Ok((tag >> 3, tag & 7))
    }

    fn length_delimited(&mut self) -> Result<&'a [u8], NotFast> {
        let len = self.varint()?;
        if len > i32::MAX as u64 {
            return Err(NotFast::LengthTooLarge(len));
        }
        let len = len as usize;
        if len > self.buf.len() {
            return Err(NotFast::Truncated);
        }
        let (body, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tf::proto::{RecvTensorResponse, TensorProto};

    fn tensor(dtype: i32, dims: &[i64], content: &[u8]) -> TensorProto {
        TensorProto::shaped(dtype, dims, content.to_vec().into())
    }

    fn response(t: TensorProto) -> Vec<u8> {
        RecvTensorResponse {
            tensor: Some(t),
            send_start_micros: 42,
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn prost_serialization_of_a_plain_tensor_is_fast() {
        let parsed = check(&response(tensor(1, &[2, 3], &[0; 24]))).unwrap();
        assert_eq!(
            parsed,
            FastParsed {
                has_tensor: true,
                dtype: 1,
                dims: vec![2, 3],
                content_len: Some(24)
            }
        );
        // Other memcpy types.
        check(&response(tensor(DataType::DtInt64 as i32, &[3], &[0; 24]))).unwrap();
        check(&response(tensor(DataType::DtHalf as i32, &[3], &[0; 6]))).unwrap();
        check(&response(tensor(
            DataType::DtComplex128 as i32,
            &[1],
            &[0; 16],
        )))
        .unwrap();
    }

    #[test]
    fn refusals() {
        assert_eq!(
            check(&response(tensor(1, &[2, 3], &[0; 20]))),
            Err(NotFast::ContentSize {
                expected: 24,
                actual: 20
            })
        );
        assert_eq!(
            check(&response(tensor(DataType::DtString as i32, &[1], &[]))),
            Err(NotFast::NotMemcpy(7))
        );
        let mut t = tensor(1, &[1], &[0; 4]);
        t.float_val = vec![1.0];
        assert_eq!(
            check(&response(t)),
            Err(NotFast::UnexpectedField {
                field: 5,
                wire_type: 2,
                place: "in the tensor"
            })
        );
        // A scalar the way TF's own encoder writes it: no shape field at all.
        let mut t = tensor(1, &[], &[0; 4]);
        t.tensor_shape = None;
        assert_eq!(check(&response(t)), Err(NotFast::ContentBeforeShape));
        // Shapes TF aborts on.
        assert_eq!(
            check(&response(tensor(1, &[-1], &[]))),
            Err(NotFast::Aborts(Abort::NegativeDim))
        );
        assert_eq!(
            check(&response(tensor(1, &[1 << 40, 1 << 40], &[]))),
            Err(NotFast::Aborts(Abort::TooManyElements))
        );
        assert_eq!(
            check(&response(tensor(1, &[1; 255], &[0; 4]))),
            Err(NotFast::Aborts(Abort::TooManyDims))
        );
        check(&response(tensor(1, &[1; 254], &[0; 4]))).unwrap();
        // unknown_rank is ignored.
        let mut t = tensor(1, &[1], &[0; 4]);
        t.tensor_shape.as_mut().unwrap().unknown_rank = true;
        check(&response(t)).unwrap();
        // Content first, then shape (hand-written).
        let wire = [0x0a, 0x08, 0x22, 0x00, 0x12, 0x00, 0x08, 0x01, 0x00, 0x00];
        assert_eq!(check(&wire[..8]), Err(NotFast::Truncated));
        assert_eq!(
            check(&[0x0a, 0x06, 0x22, 0x00, 0x12, 0x00, 0x08, 0x01]),
            Err(NotFast::ContentBeforeShape)
        );
        // A second dtype after the (empty) content of a [0] tensor.
        assert_eq!(
            check(&[0x0a, 0x0a, 0x08, 0x01, 0x12, 0x02, 0x12, 0x00, 0x22, 0x00, 0x08, 0x01]),
            Err(NotFast::FieldAfterContent(1))
        );
        // No dtype before the content, or none at all: TF aborts.
        assert_eq!(
            check(&[0x0a, 0x06, 0x12, 0x00, 0x22, 0x00, 0x08, 0x01]),
            Err(NotFast::Aborts(Abort::MissingDtype))
        );
        let aborts = Err(NotFast::Aborts(Abort::MissingDtype));
        assert_eq!(check(&[0x0a, 0x02, 0x12, 0x00]), aborts);
        assert_eq!(check(&[0x0a, 0x00]), aborts);
        // An explicit dtype 0 is refused, not fatal.
        assert_eq!(check(&[0x0a, 0x02, 0x08, 0x00]), Err(NotFast::NotMemcpy(0)));
        // Unknown response field 6, and a zero tag.
        assert_eq!(
            check(&[0x30, 0x01]),
            Err(NotFast::UnexpectedField {
                field: 6,
                wire_type: 0,
                place: "in the response"
            })
        );
        assert_eq!(check(&[0x00]), Err(NotFast::TagOutOfRange(0)));
        // is_dead with the wrong wire type.
        assert!(matches!(
            check(&[0x12, 0x00]),
            Err(NotFast::UnexpectedField { field: 2, .. })
        ));
        // A length above INT_MAX.
        assert_eq!(
            check(&[0x0a, 0x80, 0x80, 0x80, 0x80, 0x08]),
            Err(NotFast::LengthTooLarge(1 << 31))
        );
    }

    #[test]
    fn empty_message_and_dead_tensor_are_fast() {
        assert_eq!(check(&[]).unwrap(), FastParsed::default());
        // is_dead with an empty tensor, as TF sends a dead tensor.
        let parsed = check(&[0x10, 0x01, 0x0a, 0x02, 0x08, 0x01]).unwrap();
        assert!(parsed.has_tensor);
        assert_eq!(parsed.content_len, None);
    }

    #[test]
    fn never_panics_on_junk() {
        let mut seed = 0x1234_5678_u32;
        for len in 0..200 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed >> 24) as u8
                })
                .collect();
            let _ = check(&junk);
            let mut framed = vec![0x0a, len as u8];
            framed.extend_from_slice(&junk);
            let _ = check(&framed);
        }
    }
}
