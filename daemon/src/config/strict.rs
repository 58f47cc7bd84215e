//! Strict types for every layer of the configuration.
//!
//! The `config` crate converts what it can: `pull_cache = 8.5` becomes 9,
//! `"yes"` becomes true, `min_bytes = "2048"` a number. An operator who
//! wrote those meant something else (or made a typo), and tlcd would run
//! on a value nobody wrote. So after the merge, every value a layer gave
//! is compared with the type its key has in the configuration: a number
//! where a number goes (a whole one where a whole one goes), a boolean
//! where a boolean goes, a string where a string goes. Environment
//! variables are text by nature; theirs must parse as the key's type
//! exactly (`2048`, not `2048.5`; `true` or `false`, not `yes`).

use std::collections::BTreeMap;

use config::{Map, Value as ConfigValue, ValueKind};
use serde_json::Value;

use super::{Config, ConfigError};

/// What one layer gave for a key.
pub(super) enum Given<'a> {
    /// A typed value: the file's, a flag's, the admin API's.
    Typed(Value),
    /// The text of an environment variable, named for errors.
    Text { text: &'a str, variable: &'a str },
}

/// The values of a layer, by dotted key.
pub(super) type Layer<'a> = Vec<(String, Given<'a>)>;

/// The file's values as a layer of typed values, table by table.
pub(super) fn file_layer(table: &Map<String, ConfigValue>) -> Layer<'static> {
    table
        .iter()
        .map(|(name, value)| (name.clone(), Given::Typed(to_json(value))))
        .collect()
}

/// Refuses the first value of `layers` whose type is not its key's in
/// `config` (the merged, deserialized configuration).
pub(super) fn check(config: &Config, layers: &[Layer<'_>]) -> Result<(), ConfigError> {
    let target = serde_json::to_value(config).map_err(|err| ConfigError::Merge {
        message: format!("cannot read the configuration's types: {err}"),
    })?;
    for layer in layers {
        for (key, given) in layer {
            let Some(expected) = lookup(&target, key) else {
                // Not a key of the configuration: refused where it is
                // deserialized, with its name.
                continue;
            };
            match given {
                Given::Typed(value) => typed(key, value, expected)?,
                Given::Text { text, variable } => text_value(key, text, variable, expected)?,
            }
        }
    }
    Ok(())
}

/// The value at a dotted key.
fn lookup<'v>(root: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(root, |value, name| value.get(name))
}

/// What a key of `expected`'s type takes, for errors.
fn kind_allowed(expected: &Value) -> &'static str {
    match expected {
        Value::Bool(_) => "true or false, without quotes",
        Value::Number(n) if n.is_f64() => "a number, without quotes",
        Value::Number(_) => "a whole number, without quotes or a fraction",
        Value::String(_) => "a string, in quotes",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
        Value::Null => "any value",
    }
}

/// Whether `given` has the type of `expected`; tables and lists element by
/// element.
fn typed(key: &str, given: &Value, expected: &Value) -> Result<(), ConfigError> {
    let fits = match (given, expected) {
        // An option unset in the result (its type is not known here), or
        // unset by this layer.
        (_, Value::Null) | (Value::Null, _) => true,
        (Value::Object(map), Value::Object(inner)) => {
            for (name, value) in map {
                if let Some(expected) = inner.get(name) {
                    typed(&format!("{key}.{name}"), value, expected)?;
                }
            }
            true
        }
        (Value::Array(items), Value::Array(inner)) => {
            // A higher layer may have replaced the list: its first item
            // stands for the type of all.
            for (i, item) in items.iter().enumerate() {
                if let Some(expected) = inner.get(i).or_else(|| inner.first()) {
                    typed(&format!("{key}[{i}]"), item, expected)?;
                }
            }
            true
        }
        (Value::Bool(_), Value::Bool(_)) | (Value::String(_), Value::String(_)) => true,
        (Value::Number(n), Value::Number(e)) => e.is_f64() || !n.is_f64(),
        _ => false,
    };
    if fits {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        key: key.to_string(),
        value: given.to_string(),
        allowed: kind_allowed(expected).to_string(),
    })
}

/// Whether an environment variable's text parses as `expected`'s type.
fn text_value(key: &str, text: &str, variable: &str, expected: &Value) -> Result<(), ConfigError> {
    let (fits, allowed) = match expected {
        Value::Bool(_) => (matches!(text, "true" | "false"), "true or false"),
        Value::Number(n) if n.is_f64() => {
            (text.parse::<f64>().is_ok_and(f64::is_finite), "a number")
        }
        Value::Number(_) => (
            text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok(),
            "a whole number",
        ),
        Value::Object(_) => (false, "a table: set its keys one by one (TABLE__KEY)"),
        _ => (true, ""),
    };
    if fits {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        key: format!("{key} (env {variable})"),
        value: text.to_string(),
        allowed: allowed.to_string(),
    })
}

/// A value of the `config` crate as JSON, keeping its type.
fn to_json(value: &ConfigValue) -> Value {
    match &value.kind {
        ValueKind::Nil => Value::Null,
        ValueKind::Boolean(b) => Value::Bool(*b),
        ValueKind::I64(i) => Value::from(*i),
        ValueKind::I128(i) => {
            i64::try_from(*i).map_or_else(|_| Value::from(*i as f64), Value::from)
        }
        ValueKind::U64(u) => Value::from(*u),
        ValueKind::U128(u) => {
            u64::try_from(*u).map_or_else(|_| Value::from(*u as f64), Value::from)
        }
        ValueKind::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        ValueKind::String(s) => Value::String(s.clone()),
        ValueKind::Table(map) => Value::Object(
            map.iter()
                .map(|(name, inner)| (name.clone(), to_json(inner)))
                .collect(),
        ),
        ValueKind::Array(items) => Value::Array(items.iter().map(to_json).collect()),
    }
}

/// The environment layer: the text of each variable at its key.
pub(super) fn env_layer<'a>(
    env: &'a BTreeMap<String, String>,
    key_of: impl Fn(&str) -> String,
) -> Layer<'a> {
    env.iter()
        .map(|(variable, text)| {
            (
                key_of(variable),
                Given::Text {
                    text: text.as_str(),
                    variable: variable.as_str(),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::layers::Layers;
    use crate::config::Config;
    use serde_json::json;

    fn refused(toml: &str) -> String {
        Config::from_toml(toml).expect_err(toml).to_string()
    }

    #[test]
    fn no_fraction_where_a_whole_number_goes() {
        assert_eq!(
            refused("[contexts]\npull_cache = 8.5\n"),
            "contexts.pull_cache = 8.5: a whole number, without quotes or a fraction"
        );
        assert!(refused("drain_seconds = 5.0\n").starts_with("drain_seconds = 5.0: "));
        // A whole number where a fraction may go is a number all the same.
        let config = Config::from_toml("[policy.push]\nsparsity = 1\n").unwrap();
        assert_eq!(config.policy.push.sparsity, Some(1.0));
    }

    #[test]
    fn no_string_where_a_boolean_or_a_number_goes() {
        assert_eq!(
            refused("[policy]\nentropy = \"yes\"\n"),
            "policy.entropy = \"yes\": true or false, without quotes"
        );
        assert_eq!(
            refused("[policy]\nmin_bytes = \"2048\"\n"),
            "policy.min_bytes = \"2048\": a whole number, without quotes or a fraction"
        );
        assert!(refused("[policy.push]\nfeedback = \"true\"\n").starts_with("policy.push.feedback"));
        assert!(refused("[log]\nlevel = 3\n").starts_with("log.level = 3: a string"));
        // Inside a list of tables too.
        let err = refused("[[policy.overrides]]\ntensor = \"*a*\"\nskip = \"yes\"\n");
        assert!(
            err.starts_with("policy.overrides[0].skip = \"yes\""),
            "{err}"
        );
    }

    #[test]
    fn environment_text_parses_as_the_keys_type() {
        let resolve = |name: &str, value: &str| Layers::with_env(&[(name, value)]).resolve();
        assert_eq!(
            resolve("TLC_POLICY__MIN_BYTES", "2048")
                .unwrap()
                .config
                .policy
                .min_bytes,
            2048
        );
        let err = resolve("TLC_POLICY__MIN_BYTES", "2048.5")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "policy.min_bytes (env TLC_POLICY__MIN_BYTES) = 2048.5: a whole number"
        );
        let err = resolve("TLC_POLICY__ENTROPY", "yes")
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("= yes: true or false"), "{err}");
        assert!(
            !resolve("TLC_POLICY__ENTROPY", "false")
                .unwrap()
                .config
                .policy
                .entropy
        );
    }

    #[test]
    fn run_time_changes_are_as_strict() {
        let mut layers = Layers::default();
        layers.api.insert("contexts.pull_cache".into(), json!(8.5));
        let err = layers.resolve().unwrap_err().to_string();
        assert!(
            err.starts_with("contexts.pull_cache = 8.5: a whole number"),
            "{err}"
        );
        layers.api.insert("contexts.pull_cache".into(), json!(16));
        assert_eq!(layers.resolve().unwrap().config.contexts.pull_cache, 16);
    }
}
