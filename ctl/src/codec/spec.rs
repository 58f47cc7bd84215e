//! Naming codecs on the command line: the names [`CodecId`] parses, the
//! presets `topk5` and `topk25`, per-codec settings, and row labels.

use anyhow::{anyhow, bail, Context, Result};
use tlc_codec::{Codec, CodecId, Sparsity, TopKPercent};

/// A codec name as given on the command line: a [`CodecId`] or a preset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CodecName {
    /// A codec by its library name (or one of the library's aliases).
    Id(CodecId),
    /// Top-k with a preset share (`topk5`, `topk25`).
    TopKPreset(TopKPercent),
}

impl CodecName {
    /// Parses a name: anything [`CodecId`] parses, plus `topk5` and `topk25`.
    pub fn parse(name: &str) -> Result<CodecName> {
        match name.to_ascii_lowercase().as_str() {
            "topk5" => Ok(CodecName::TopKPreset(TopKPercent::P5)),
            "topk25" => Ok(CodecName::TopKPreset(TopKPercent::P25)),
            _ => name
                .parse::<CodecId>()
                .map(CodecName::Id)
                .map_err(|e| anyhow!("{e} (presets: topk5, topk25)")),
        }
    }

    /// The codec this name stands for.
    pub fn id(self) -> CodecId {
        match self {
            CodecName::Id(id) => id,
            CodecName::TopKPreset(_) => CodecId::TopK,
        }
    }
}

/// The settings a codec may be given besides its name.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Settings {
    /// 3LC sparsity multiplier `s`.
    pub sparsity: Option<f32>,
    /// Top-k share in percent.
    pub k: Option<f32>,
    /// TernGrad random seed.
    pub seed: Option<u64>,
}

/// Builds a codec from a name and settings, rejecting a setting the codec
/// does not take and any value the library rejects.
pub fn build(name: &str, settings: Settings) -> Result<Codec> {
    let parsed = CodecName::parse(name)?;
    let id = parsed.id();
    if settings.sparsity.is_some() && id != CodecId::ThreeLc {
        bail!("--sparsity applies only to --codec 3lc, not {name}");
    }
    if settings.k.is_some() && id != CodecId::TopK {
        bail!("--k applies only to --codec topk, not {name}");
    }
    if settings.seed.is_some() && id != CodecId::TernGrad {
        bail!("--seed applies only to --codec terngrad, not {name}");
    }
    let codec = match parsed {
        CodecName::TopKPreset(percent) => {
            if settings.k.is_some() {
                bail!("--k cannot change the preset {name}; use --codec topk --k PERCENT");
            }
            Codec::TopK { percent }
        }
        CodecName::Id(CodecId::ThreeLc) => match settings.sparsity {
            Some(s) => Codec::ThreeLc {
                sparsity: Sparsity::new(s)?,
            },
            None => id.with_defaults(),
        },
        CodecName::Id(CodecId::TopK) => match settings.k {
            Some(k) => Codec::TopK {
                percent: TopKPercent::new(k)?,
            },
            None => id.with_defaults(),
        },
        CodecName::Id(CodecId::TernGrad) => Codec::TernGrad {
            seed: settings.seed.unwrap_or(0),
        },
        CodecName::Id(id) => id.with_defaults(),
    };
    Ok(codec)
}

/// Parses a benchmark row `NAME[:PARAM]`: PARAM is the sparsity for 3lc,
/// the share in percent for topk and the seed for terngrad.
pub fn parse_row(text: &str) -> Result<Codec> {
    let (name, param) = match text.split_once(':') {
        Some((name, param)) => (name, Some(param)),
        None => (text, None),
    };
    let mut settings = Settings::default();
    if let Some(param) = param {
        let bad = || format!("invalid parameter '{param}' in codec '{text}'");
        match CodecName::parse(name)? {
            CodecName::Id(CodecId::ThreeLc) => {
                settings.sparsity = Some(param.parse().with_context(bad)?);
            }
            CodecName::Id(CodecId::TopK) => settings.k = Some(param.parse().with_context(bad)?),
            CodecName::Id(CodecId::TernGrad) => {
                settings.seed = Some(param.parse().with_context(bad)?);
            }
            _ => bail!("codec '{name}' takes no parameter (in '{text}')"),
        }
    }
    build(name, settings).with_context(|| format!("codec '{text}'"))
}

/// A short human label: `3lc s=1.75`, `topk k=5`, `terngrad seed=3`, `int8`.
pub fn label(codec: &Codec) -> String {
    match codec {
        Codec::ThreeLc { sparsity } => format!("3lc s={}", number(sparsity.get())),
        Codec::TopK { percent } => format!("topk k={}", percent.get()),
        Codec::TernGrad { seed } if *seed != 0 => format!("terngrad seed={seed}"),
        other => other.id().name().to_string(),
    }
}

/// Formats a setting with at least one decimal (`1.0`, `1.75`).
pub fn number(v: f32) -> String {
    if v.fract() == 0.0 {
        format!("{v:.1}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_labels() {
        let c = build("topk5", Settings::default()).unwrap();
        assert_eq!(label(&c), "topk k=5");
        let c = parse_row("3lc:1.75").unwrap();
        assert_eq!(label(&c), "3lc s=1.75");
        assert_eq!(label(&parse_row("3lc").unwrap()), "3lc s=1.0");
        assert_eq!(label(&parse_row("TLC").unwrap()), "3lc s=1.0");
    }

    #[test]
    fn settings_must_fit_the_codec() {
        let s = Settings {
            sparsity: Some(1.5),
            ..Settings::default()
        };
        let err = build("int8", s).unwrap_err().to_string();
        assert!(
            err.contains("--sparsity applies only to --codec 3lc"),
            "{err}"
        );
        let s = Settings {
            sparsity: Some(2.5),
            ..Settings::default()
        };
        let err = format!("{:#}", build("3lc", s).unwrap_err());
        assert!(err.contains("out of range [1.0, 2.0)"), "{err}");
        assert!(parse_row("int8:3").is_err());
        assert!(parse_row("gzip").is_err());
    }
}
