//! The codec parameters a frame carries: what each codec's decoder needs
//! besides the payload, their length on the wire, and their validation.
//!
//! The lowest layer shared by the frame format and the codecs: codecs return
//! [`Params`] from encoding, the frame writes and parses them, and the
//! registry (`dispatch`) picks a decoder by them. `codec/FORMAT.md` lists
//! each codec's parameter bytes and constraints.

use crate::codec::CodecId;
use crate::error::DecodeError;

/// The per-frame settings a decoder needs, one variant per codec.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Params {
    /// Raw f32: nothing.
    None,
    /// fp16: nothing.
    Fp16,
    /// bf16: nothing.
    Bf16,
    /// int8: a value is `q * step` with `step = max|x| / 127`.
    Int8 {
        /// Size of one quantization level.
        step: f32,
    },
    /// int8 with a step per row: the payload carries each row's step.
    Int8Rows {
        /// Values per row (the last row may be shorter).
        row_len: u32,
    },
    /// TernGrad: a value is `q * scale`, `q` in {-1, 0, 1}.
    TernGrad {
        /// `max|x|`.
        scale: f32,
    },
    /// 1-bit: a set bit decodes to `positive`, a clear one to `negative`.
    OneBit {
        /// Mean of the non-negative values.
        positive: f32,
        /// Mean of the negative values.
        negative: f32,
    },
    /// Top-k: which share was asked for and how many values were kept.
    TopK {
        /// Share of values asked for, in percent.
        percent: f32,
        /// Number of values in the payload (set bits in the bitmap).
        kept: u32,
    },
    /// 3LC: a value is `q * scale`, `q` in {-1, 0, 1}.
    ThreeLc {
        /// `M = max|acc| * s`.
        scale: f32,
        /// The sparsity multiplier the sender used (informational).
        sparsity: f32,
    },
}

impl Params {
    /// The codec these parameters belong to.
    pub fn codec(&self) -> CodecId {
        match self {
            Params::None => CodecId::None,
            Params::Fp16 => CodecId::Fp16,
            Params::Bf16 => CodecId::Bf16,
            Params::Int8 { .. } => CodecId::Int8,
            Params::Int8Rows { .. } => CodecId::Int8Rows,
            Params::TernGrad { .. } => CodecId::TernGrad,
            Params::OneBit { .. } => CodecId::OneBit,
            Params::TopK { .. } => CodecId::TopK,
            Params::ThreeLc { .. } => CodecId::ThreeLc,
        }
    }

    /// Length in bytes of a codec's parameters on the wire.
    pub fn wire_len(codec: CodecId) -> usize {
        match codec {
            CodecId::None | CodecId::Fp16 | CodecId::Bf16 => 0,
            CodecId::Int8 | CodecId::Int8Rows | CodecId::TernGrad => 4,
            CodecId::OneBit | CodecId::TopK | CodecId::ThreeLc => 8,
        }
    }

    /// Writes the parameters into `out`, which has at least
    /// `wire_len(self.codec())` bytes.
    pub(crate) fn write(&self, out: &mut [u8]) {
        let (a, b): (Option<[u8; 4]>, Option<[u8; 4]>) = match *self {
            Params::None | Params::Fp16 | Params::Bf16 => (None, None),
            Params::Int8 { step: v } | Params::TernGrad { scale: v } => {
                (Some(v.to_le_bytes()), None)
            }
            Params::Int8Rows { row_len } => (Some(row_len.to_le_bytes()), None),
            Params::OneBit { positive, negative } => {
                (Some(positive.to_le_bytes()), Some(negative.to_le_bytes()))
            }
            Params::TopK { percent, kept } => {
                (Some(percent.to_le_bytes()), Some(kept.to_le_bytes()))
            }
            Params::ThreeLc { scale, sparsity } => {
                (Some(scale.to_le_bytes()), Some(sparsity.to_le_bytes()))
            }
        };
        if let Some(a) = a {
            out[..4].copy_from_slice(&a);
        }
        if let Some(b) = b {
            out[4..8].copy_from_slice(&b);
        }
    }

    /// Reads and validates parameters; `bytes` has exactly `wire_len(codec)` bytes.
    pub(crate) fn parse(
        codec: CodecId,
        bytes: &[u8],
        elements: u64,
    ) -> Result<Params, DecodeError> {
        let word = |at: usize| -> [u8; 4] {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[at..at + 4]);
            w
        };
        let float = |at: usize| f32::from_le_bytes(word(at));
        let scale = |name: &str, v: f32| {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(DecodeError::BadParams(format!(
                    "{name} {v} must be finite and >= 0"
                )))
            }
        };
        let params = match codec {
            CodecId::None => Params::None,
            CodecId::Fp16 => Params::Fp16,
            CodecId::Bf16 => Params::Bf16,
            CodecId::Int8 => {
                let step = scale("int8 step", float(0))?;
                if !(step * 127.0).is_finite() {
                    return Err(DecodeError::BadParams(format!(
                        "int8 step {step} overflows at level 127"
                    )));
                }
                Params::Int8 { step }
            }
            CodecId::Int8Rows => {
                let row_len = u32::from_le_bytes(word(0));
                if row_len == 0 {
                    return Err(DecodeError::BadParams(
                        "int8-rows row length 0 must be at least 1".into(),
                    ));
                }
                Params::Int8Rows { row_len }
            }
            CodecId::TernGrad => Params::TernGrad {
                scale: scale("terngrad scale", float(0))?,
            },
            CodecId::OneBit => {
                let (positive, negative) = (float(0), float(4));
                if !(positive.is_finite()
                    && positive >= 0.0
                    && negative.is_finite()
                    && negative <= 0.0)
                {
                    return Err(DecodeError::BadParams(format!(
                        "onebit means ({positive}, {negative}) must be finite, >= 0 and <= 0"
                    )));
                }
                Params::OneBit { positive, negative }
            }
            CodecId::TopK => {
                let percent = float(0);
                let kept = u32::from_le_bytes(word(4));
                if !(percent > 0.0 && percent <= 100.0) {
                    return Err(DecodeError::BadParams(format!(
                        "topk share {percent} not in (0, 100]"
                    )));
                }
                if u64::from(kept) > elements {
                    return Err(DecodeError::BadParams(format!(
                        "topk keeps {kept} of {elements} values"
                    )));
                }
                Params::TopK { percent, kept }
            }
            CodecId::ThreeLc => {
                let sparsity = float(4);
                if !(1.0..2.0).contains(&sparsity) {
                    return Err(DecodeError::BadParams(format!(
                        "3lc sparsity {sparsity} not in [1, 2)"
                    )));
                }
                Params::ThreeLc {
                    scale: scale("3lc scale", float(0))?,
                    sparsity,
                }
            }
        };
        Ok(params)
    }
}
