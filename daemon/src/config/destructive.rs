//! Settings that are valid but known to destroy a model, refused unless
//! the operator names them in `allow_destructive`.
//!
//! `[policy.sparse]` and `[policy.unknown]` compress each tensor on its
//! own, without memory (no error feedback, no replica). A codec that
//! relies on memory to carry what one pass leaves out (3LC, TernGrad,
//! 1-bit) then loses that part for good: with `[policy.sparse] codec =
//! "3lc"` the embedding model of docs/LIMITS.md ("Sparse tensors without
//! row ids are only halved") reached 16% and 14% accuracy against 94%.

use std::str::FromStr;

use tlc_codec::CodecId;

use super::{Config, ConfigError};

/// Codecs that need memory to be right.
const NEEDS_MEMORY: &[CodecId] = &[CodecId::ThreeLc, CodecId::TernGrad, CodecId::OneBit];

/// The keys `allow_destructive` may name.
pub const KEYS: &[&str] = &["policy.sparse.codec", "policy.unknown.codec"];

/// Refuses a known-destructive setting that `allow_destructive` does not
/// name, and a name there that is no such key.
pub fn check(config: &Config) -> Result<(), ConfigError> {
    for (i, key) in config.allow_destructive.iter().enumerate() {
        if !KEYS.contains(&key.as_str()) {
            return Err(ConfigError::Invalid {
                key: format!("allow_destructive[{i}]"),
                value: format!("{key:?}"),
                allowed: format!("one of {}", KEYS.join(", ")),
            });
        }
    }
    for (key, codec) in [
        (KEYS[0], &config.policy.sparse.codec),
        (KEYS[1], &config.policy.unknown.codec),
    ] {
        let needs_memory = CodecId::from_str(codec).is_ok_and(|id| NEEDS_MEMORY.contains(&id));
        if needs_memory && !config.allow_destructive.iter().any(|k| k == key) {
            return Err(ConfigError::Invalid {
                key: key.to_string(),
                value: codec.clone(),
                allowed: format!(
                    "a codec that needs no memory, such as fp16, bf16, int8 or none: these \
                     tensors travel without memory, and 3lc, terngrad and onebit without memory \
                     destroyed an embedding model (docs/LIMITS.md: 16% and 14% accuracy against \
                     94%); to use it anyway, \
                     allow_destructive = [\"{key}\"]"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::layers::Layers;
    use crate::config::Config;
    use serde_json::json;

    #[test]
    fn a_memoryless_lossy_codec_for_sparse_rows_is_refused() {
        for codec in ["3lc", "terngrad", "onebit", "3LC"] {
            let err = Config::from_toml(&format!("[policy.sparse]\ncodec = \"{codec}\"\n"))
                .expect_err(codec)
                .to_string();
            assert!(
                err.starts_with(&format!("policy.sparse.codec = {codec}: ")),
                "{err}"
            );
            assert!(err.contains("docs/LIMITS.md"), "{err}");
            assert!(
                err.contains("allow_destructive = [\"policy.sparse.codec\"]"),
                "{err}"
            );
        }
        let err = Config::from_toml("[policy.unknown]\ncodec = \"3lc\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("policy.unknown.codec = 3lc"), "{err}");
        // Codecs that need no memory pass.
        for codec in ["fp16", "int8", "none"] {
            Config::from_toml(&format!("[policy.sparse]\ncodec = \"{codec}\"\n")).expect(codec);
        }
    }

    #[test]
    fn the_override_names_the_key() {
        let config = Config::from_toml(
            "allow_destructive = [\"policy.sparse.codec\"]\n[policy.sparse]\ncodec = \"3lc\"\n",
        )
        .unwrap();
        assert_eq!(config.policy.sparse.codec, "3lc");
        // Allowing one key does not allow the other.
        let err = Config::from_toml(
            "allow_destructive = [\"policy.sparse.codec\"]\n[policy.unknown]\ncodec = \"onebit\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("policy.unknown.codec = onebit"), "{err}");
        let err = Config::from_toml("allow_destructive = [\"policy.sparse\"]\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "allow_destructive[0] = \"policy.sparse\": one of policy.sparse.codec, policy.unknown.codec"
        );
    }

    #[test]
    fn run_time_changes_and_the_environment_are_checked_alike() {
        // A change through the admin API resolves as every layer does.
        let mut layers = Layers::default();
        layers
            .api
            .insert("policy.sparse.codec".into(), json!("3lc"));
        let err = layers.resolve().unwrap_err().to_string();
        assert!(err.starts_with("policy.sparse.codec = 3lc: "), "{err}");
        layers
            .api
            .insert("allow_destructive".into(), json!(["policy.sparse.codec"]));
        assert_eq!(layers.resolve().unwrap().config.policy.sparse.codec, "3lc");
        let layers = Layers::with_env(&[
            ("TLC_POLICY__SPARSE__CODEC", "3lc"),
            (
                "TLC_ALLOW_DESTRUCTIVE",
                "policy.sparse.codec,policy.unknown.codec",
            ),
        ]);
        let config = layers.resolve().unwrap().config;
        assert_eq!(config.allow_destructive.len(), 2);
    }
}
