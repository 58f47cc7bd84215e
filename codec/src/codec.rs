//! What a codec is: its name, its wire id and its settings.

use std::fmt;
use std::str::FromStr;

use crate::error::SpecError;

/// The 3LC sparsity multiplier `s`, validated to `1 <= s < 2`.
///
/// Larger `s` makes the scale `M = max|acc| * s` larger, so more values
/// round to zero: fewer bits on the wire, more error carried to later steps.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Sparsity(f32);

impl Sparsity {
    /// `s = 1.0`, the setting that sends the most information.
    pub const ONE: Sparsity = Sparsity(1.0);

    /// Checks `1 <= s < 2`; anything else (including NaN) is an error, never a clamp.
    pub fn new(s: f32) -> Result<Self, SpecError> {
        if (1.0..2.0).contains(&s) {
            Ok(Sparsity(s))
        } else {
            Err(SpecError::Sparsity(s))
        }
    }

    /// The multiplier as a number.
    pub fn get(self) -> f32 {
        self.0
    }
}

/// The share of values top-k keeps, in percent, validated to `0 < k <= 100`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct TopKPercent(f32);

impl TopKPercent {
    /// Keep the largest 25% of values (a preset of the 3LC paper's baselines).
    pub const P25: TopKPercent = TopKPercent(25.0);
    /// Keep the largest 5% of values (a preset of the 3LC paper's baselines).
    pub const P5: TopKPercent = TopKPercent(5.0);

    /// Checks `0 < k <= 100`.
    pub fn new(k: f32) -> Result<Self, SpecError> {
        if k > 0.0 && k <= 100.0 {
            Ok(TopKPercent(k))
        } else {
            Err(SpecError::TopKPercent(k))
        }
    }

    /// The share as a percentage.
    pub fn get(self) -> f32 {
        self.0
    }
}

/// A codec and the settings its encoder needs.
///
/// Decoding needs none of these settings: everything the receiver needs
/// travels in the frame, which is why a sender may change them at any time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Codec {
    /// Raw little-endian f32: lossless, 32 bits per value.
    None,
    /// IEEE 754 half precision, rounded to nearest even.
    Fp16,
    /// bfloat16 (the upper half of an f32), rounded to nearest even.
    Bf16,
    /// 255 levels in [-127, 127] scaled by `max|x| / 127`.
    Int8,
    /// int8 with a step per row of `row_len` values (`max|row| / 127`):
    /// one row's error stays within its own scale, whatever the others'.
    Int8Rows {
        /// Values per row.
        row_len: u32,
    },
    /// TernGrad: stochastic 3-value quantization packed with quartic encoding.
    TernGrad {
        /// Seed of the random stream; the same seed and inputs give the same frames.
        seed: u64,
    },
    /// 1-bit quantization with minimum squared error: a sign bit per value and
    /// the means of the non-negative and of the negative values.
    OneBit,
    /// Top-k sparsification: a bitmap and the largest `k`% of values.
    TopK {
        /// Share of values kept.
        percent: TopKPercent,
    },
    /// 3LC: 3-value quantization with sparsity multiplier, quartic encoding
    /// and zero-run encoding.
    ThreeLc {
        /// The sparsity multiplier `s`.
        sparsity: Sparsity,
    },
}

/// Values per row of `int8-rows` unless the caller knows its rows (a
/// table's keyframes use the table's row length): a block of 32, as
/// block-wise int8 quantizers commonly use.
pub const DEFAULT_ROW_LEN: u32 = 32;

/// A codec's identity on the wire (one byte in the frame header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CodecId {
    /// See [`Codec::None`].
    None = 0,
    /// See [`Codec::Fp16`].
    Fp16 = 1,
    /// See [`Codec::Bf16`].
    Bf16 = 2,
    /// See [`Codec::Int8`].
    Int8 = 3,
    /// See [`Codec::TernGrad`].
    TernGrad = 4,
    /// See [`Codec::OneBit`].
    OneBit = 5,
    /// See [`Codec::TopK`].
    TopK = 6,
    /// See [`Codec::ThreeLc`].
    ThreeLc = 7,
    /// See [`Codec::Int8Rows`].
    Int8Rows = 8,
}

impl CodecId {
    /// Every codec, in wire-id order.
    pub const ALL: [CodecId; 9] = [
        CodecId::None,
        CodecId::Fp16,
        CodecId::Bf16,
        CodecId::Int8,
        CodecId::TernGrad,
        CodecId::OneBit,
        CodecId::TopK,
        CodecId::ThreeLc,
        CodecId::Int8Rows,
    ];

    /// The id for a wire byte, if it names a codec.
    pub fn from_byte(byte: u8) -> Option<CodecId> {
        CodecId::ALL.get(usize::from(byte)).copied()
    }

    /// The codec's short name, as used on command lines and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Fp16 => "fp16",
            CodecId::Bf16 => "bf16",
            CodecId::Int8 => "int8",
            CodecId::TernGrad => "terngrad",
            CodecId::OneBit => "onebit",
            CodecId::TopK => "topk",
            CodecId::ThreeLc => "3lc",
            CodecId::Int8Rows => "int8-rows",
        }
    }

    /// The codec with default settings (s = 1.0, k = 25%, seed 0, rows of
    /// [`DEFAULT_ROW_LEN`] values).
    pub fn with_defaults(self) -> Codec {
        match self {
            CodecId::None => Codec::None,
            CodecId::Fp16 => Codec::Fp16,
            CodecId::Bf16 => Codec::Bf16,
            CodecId::Int8 => Codec::Int8,
            CodecId::TernGrad => Codec::TernGrad { seed: 0 },
            CodecId::OneBit => Codec::OneBit,
            CodecId::TopK => Codec::TopK {
                percent: TopKPercent::P25,
            },
            CodecId::ThreeLc => Codec::ThreeLc {
                sparsity: Sparsity::ONE,
            },
            CodecId::Int8Rows => Codec::Int8Rows {
                row_len: DEFAULT_ROW_LEN,
            },
        }
    }

    /// Whether error feedback is on unless asked otherwise: for the codecs
    /// that are biased by design (3LC, 1-bit, top-k) and need it to converge.
    pub fn feedback_by_default(self) -> bool {
        matches!(self, CodecId::ThreeLc | CodecId::OneBit | CodecId::TopK)
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CodecId {
    type Err = SpecError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let lower = name.to_ascii_lowercase();
        CodecId::ALL
            .into_iter()
            .find(|id| id.name() == lower)
            .or(match lower.as_str() {
                "threelc" | "tlc" => Some(CodecId::ThreeLc),
                "raw" | "f32" => Some(CodecId::None),
                _ => None,
            })
            .ok_or_else(|| SpecError::UnknownCodec(name.to_string()))
    }
}

impl Codec {
    /// The wire id of this codec.
    pub fn id(&self) -> CodecId {
        match self {
            Codec::None => CodecId::None,
            Codec::Fp16 => CodecId::Fp16,
            Codec::Bf16 => CodecId::Bf16,
            Codec::Int8 => CodecId::Int8,
            Codec::Int8Rows { .. } => CodecId::Int8Rows,
            Codec::TernGrad { .. } => CodecId::TernGrad,
            Codec::OneBit => CodecId::OneBit,
            Codec::TopK { .. } => CodecId::TopK,
            Codec::ThreeLc { .. } => CodecId::ThreeLc,
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::TernGrad { seed } => write!(f, "terngrad(seed={seed})"),
            Codec::TopK { percent } => write!(f, "topk(k={}%)", percent.get()),
            Codec::ThreeLc { sparsity } => write!(f, "3lc(s={})", sparsity.get()),
            Codec::Int8Rows { row_len } => write!(f, "int8-rows(row={row_len})"),
            other => f.write_str(other.id().name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparsity_range_is_half_open() {
        assert!(Sparsity::new(1.0).is_ok());
        assert!(Sparsity::new(1.999).is_ok());
        for bad in [0.999, 2.0, 2.5, -1.0, f32::NAN, f32::INFINITY] {
            let err = Sparsity::new(bad).unwrap_err();
            assert!(err.to_string().contains("out of range [1.0, 2.0)"), "{err}");
        }
    }

    #[test]
    fn topk_percent_range() {
        assert!(TopKPercent::new(100.0).is_ok());
        assert!(TopKPercent::new(0.01).is_ok());
        for bad in [0.0, -5.0, 100.5, f32::NAN] {
            assert!(TopKPercent::new(bad).is_err());
        }
    }

    #[test]
    fn names_round_trip() {
        for id in CodecId::ALL {
            assert_eq!(id.name().parse::<CodecId>().unwrap(), id);
            assert_eq!(CodecId::from_byte(id as u8), Some(id));
        }
        assert_eq!(CodecId::from_byte(9), None);
        assert!("gzip".parse::<CodecId>().is_err());
    }
}
