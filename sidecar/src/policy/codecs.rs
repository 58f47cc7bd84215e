//! What a codec key of the `[policy]` table names: the codec tables
//! (`[policy.push]`, `[policy.pull]`, ...) and the single-codec keys
//! (`warmup_codec`, `keyframe_codec`, `row_keyframe_codec`), checked into
//! the codec they stand for or an error that names the key and what it
//! allows.

use serde::{Deserialize, Serialize};
use tlc_admin_api::CodecView;
use tlc_codec::{Codec, CodecId, Feedback, Sparsity, TopKPercent};
use tlc_core::ConfigError;
use tlc_wire::envelope::KEYFRAME_CODECS;

/// Codec settings as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CodecSettings {
    /// Codec name: none, fp16, bf16, int8, terngrad, onebit, topk, 3lc.
    pub codec: String,
    /// 3LC sparsity multiplier, `1 <= s < 2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f32>,
    /// Top-k share in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<f32>,
    /// TernGrad seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Error feedback (default: the codec's own default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<bool>,
}

impl Default for CodecSettings {
    fn default() -> Self {
        CodecSettings {
            codec: "3lc".into(),
            // 3LC's own default (1.0) applies when unset; leaving it unset
            // lets a file or an operator switch to another codec without
            // also having to remove a sparsity inherited from the defaults.
            sparsity: None,
            k: None,
            seed: None,
            feedback: None,
        }
    }
}

/// A codec ready to use, with its feedback mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecChoice {
    /// The codec and its settings.
    pub codec: Codec,
    /// Whether push contexts keep an error buffer.
    pub feedback: Feedback,
}

/// A codec as operators read it (the admin API's words): its name and
/// the parameter it has.
pub fn codec_view(codec: Codec) -> CodecView {
    let (sparsity, k) = match codec {
        Codec::ThreeLc { sparsity } => (Some(sparsity.get()), None),
        Codec::TopK { percent } => (None, Some(percent.get())),
        _ => (None, None),
    };
    CodecView {
        codec: codec.id().name().to_string(),
        sparsity: sparsity.map(f64::from),
        k: k.map(f64::from),
    }
}

impl CodecSettings {
    /// Validates the settings; `key` names the table in errors.
    pub fn resolve(&self, key: &str) -> Result<CodecChoice, ConfigError> {
        let invalid = |field: &str, value: String, allowed: String| ConfigError::Invalid {
            key: format!("{key}.{field}"),
            value,
            allowed,
        };
        let id: CodecId = self.codec.parse().map_err(|e: tlc_codec::SpecError| {
            invalid("codec", self.codec.clone(), e.to_string())
        })?;
        let only = |field: &str, set: bool, codec: CodecId| {
            if set && id != codec {
                Err(invalid(
                    field,
                    "set".into(),
                    format!("applies only to codec \"{}\"", codec.name()),
                ))
            } else {
                Ok(())
            }
        };
        only("sparsity", self.sparsity.is_some(), CodecId::ThreeLc)?;
        only("k", self.k.is_some(), CodecId::TopK)?;
        only("seed", self.seed.is_some(), CodecId::TernGrad)?;
        let codec = match id {
            CodecId::ThreeLc => {
                let s = self.sparsity.unwrap_or(1.0);
                let sparsity = Sparsity::new(s)
                    .map_err(|e| invalid("sparsity", s.to_string(), e.to_string()))?;
                Codec::ThreeLc { sparsity }
            }
            CodecId::TopK => {
                let k = self.k.unwrap_or(TopKPercent::P25.get());
                let percent =
                    TopKPercent::new(k).map_err(|e| invalid("k", k.to_string(), e.to_string()))?;
                Codec::TopK { percent }
            }
            CodecId::TernGrad => Codec::TernGrad {
                seed: self.seed.unwrap_or(0),
            },
            other => other.with_defaults(),
        };
        let feedback = match self.feedback {
            Some(true) => Feedback::On,
            Some(false) => Feedback::Off,
            None => Feedback::default_for(&codec),
        };
        Ok(CodecChoice { codec, feedback })
    }

    /// Validates settings for a class encoded without memory: error
    /// feedback cannot be asked for.
    pub fn resolve_memoryless(&self, key: &str) -> Result<CodecChoice, ConfigError> {
        if self.feedback == Some(true) {
            return Err(ConfigError::Invalid {
                key: format!("{key}.feedback"),
                value: "true".into(),
                allowed: "false: these tensors change rows from step to step, so they are encoded without memory".into(),
            });
        }
        let choice = self.resolve(key)?;
        Ok(CodecChoice {
            feedback: Feedback::Off,
            ..choice
        })
    }
}

/// The codecs a row's keyframe may take: each row keeps its own precision.
const ROW_KEYFRAME_CODECS: [CodecId; 4] = [
    CodecId::None,
    CodecId::Fp16,
    CodecId::Bf16,
    CodecId::Int8Rows,
];

/// The codecs warm-up may take: nearly lossless ones.
const WARMUP_CODECS: [CodecId; 4] = [CodecId::None, CodecId::Fp16, CodecId::Bf16, CodecId::Int8];

/// The codec named `name` for `key`, if it is one of `allowed`, else an
/// error that lists them (`why` says what they have in common).
fn codec_among(
    key: &str,
    name: &str,
    allowed: &[CodecId],
    why: &str,
) -> Result<Codec, ConfigError> {
    name.parse::<CodecId>()
        .ok()
        .filter(|id| allowed.contains(id))
        .map(CodecId::with_defaults)
        .ok_or_else(|| {
            let names: Vec<&str> = allowed.iter().map(|id| id.name()).collect();
            let (last, rest) = names.split_last().unwrap_or((&"", &[]));
            ConfigError::Invalid {
                key: key.into(),
                value: name.into(),
                allowed: format!("{} or {last} ({why})", rest.join(", ")),
            }
        })
}

/// `policy.warmup_codec`, checked.
pub(super) fn warmup_codec(name: &str) -> Result<Codec, ConfigError> {
    let why = "a codec that loses little while training moves fastest";
    codec_among("policy.warmup_codec", name, &WARMUP_CODECS, why)
}

/// `policy.keyframe_codec`, checked against the codecs the envelope
/// format allows in a keyframe.
pub(super) fn keyframe_codec(name: &str) -> Result<Codec, ConfigError> {
    let why = "a keyframe the requester's replica can hold bit for bit";
    codec_among("policy.keyframe_codec", name, &KEYFRAME_CODECS, why)
}

/// `policy.row_keyframe_codec`, checked.
pub(super) fn row_keyframe_codec(name: &str) -> Result<Codec, ConfigError> {
    let why = "a codec that keeps each row's precision";
    codec_among("policy.row_keyframe_codec", name, &ROW_KEYFRAME_CODECS, why)
}
