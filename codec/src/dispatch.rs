//! From a codec (or a frame's parameters) to the module that implements it.

use crate::codec::Codec;
use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::float16::Half;
use crate::params::Params;
use crate::{float16, int8, onebit, raw, terngrad, tlc3, topk};

/// Per-encoder state some codecs need besides the error buffer.
pub(crate) struct Scratch<'a> {
    /// Random stream key for this tensor (TernGrad).
    pub stream_key: u64,
    /// Reusable buffer for the top-k sample.
    pub sample: &'a mut Vec<f32>,
    /// A refinement pass's goal: the squared error it may leave (3LC
    /// picks its scale toward it; other codecs ignore it).
    pub allowed_squared_error: Option<f64>,
}

/// Encodes `x` through `e` and appends the payload to `out`.
pub(crate) fn encode(
    codec: &Codec,
    x: &[f32],
    e: Option<&mut [f32]>,
    scratch: Scratch<'_>,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    let acc = Accumulator::new(x, e);
    match *codec {
        Codec::None => Ok(raw::encode(acc, out)),
        Codec::Fp16 => float16::encode(Half::Fp16, acc, out),
        Codec::Bf16 => float16::encode(Half::Bf16, acc, out),
        Codec::Int8 => int8::encode(acc, out),
        Codec::Int8Rows { row_len } => int8::encode_rows(acc, row_len, out),
        Codec::TernGrad { .. } => terngrad::encode(acc, scratch.stream_key, out),
        Codec::OneBit => onebit::encode(acc, out),
        Codec::TopK { percent } => topk::encode(acc, percent, scratch.sample, out),
        Codec::ThreeLc { sparsity } => {
            let (x, e) = acc.into_parts();
            let scale = match scratch.allowed_squared_error {
                Some(allowed_squared_error) => tlc3::Scale::Toward {
                    allowed_squared_error,
                },
                None => tlc3::Scale::Sparsity(sparsity),
            };
            tlc3::encode(x, e, scale, out)
        }
    }
}

/// Decodes a payload whose header has been validated into `out`.
pub(crate) fn decode(params: &Params, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    match *params {
        Params::None => raw::decode(payload, out),
        Params::Fp16 => float16::decode(Half::Fp16, payload, out),
        Params::Bf16 => float16::decode(Half::Bf16, payload, out),
        Params::Int8 { step } => int8::decode(step, payload, out),
        Params::Int8Rows { row_len } => int8::decode_rows(row_len, payload, out),
        Params::TernGrad { scale } => terngrad::decode(scale, payload, out),
        Params::OneBit { positive, negative } => onebit::decode(positive, negative, payload, out),
        Params::TopK { kept, .. } => topk::decode(kept, payload, out),
        Params::ThreeLc { scale, .. } => tlc3::decode(scale, payload, out),
    }
}
