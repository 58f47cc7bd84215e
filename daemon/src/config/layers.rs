//! Where a configuration comes from. Five layers, each over the one
//! before: built-in defaults, the TOML file, `TLC_*` environment variables
//! (`TLC_POLICY__PUSH__SPARSITY=1.75`: `__` separates table and key),
//! command-line flags, and changes made through the admin API. The
//! `config` crate merges them; this module also remembers which layer set
//! each value, so that an operator asking "why is s 1.75?" gets an answer.
//!
//! Tables merge key by key; an array (`routes`, `policy.overrides`,
//! `policy.parameter_jobs`, `tls.peer_identities`) is one value, replaced
//! whole by a higher layer; from the environment, the last two are
//! comma-separated lists.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use config::{Environment, File, FileFormat, Map, Source, Value, ValueKind};

use tlc_admin_api::env::CLIENT_VARIABLES;

use super::{enum_error, strict, Config, ConfigError};

/// The layer a value came from, lowest precedence first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Built into tlcd.
    Default,
    /// The TOML file at this path.
    File(PathBuf),
    /// This environment variable.
    Env(String),
    /// This command-line flag.
    Flag(String),
    /// Changed at run time through the admin API.
    Api,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Env(name) => write!(f, "env {name}"),
            Origin::Flag(name) => write!(f, "flag {name}"),
            Origin::Api => f.write_str("api"),
        }
    }
}

/// A value set by a flag.
#[derive(Debug, Clone)]
pub struct FlagValue {
    /// The dotted key it sets, e.g. `policy.push.sparsity`.
    pub key: String,
    /// The value.
    pub value: serde_json::Value,
    /// The flag as the user typed it, e.g. `--sparsity`.
    pub flag: String,
}

/// The tables and keys at the top of the configuration: only `TLC_*`
/// variables under one of these are configuration. Others (`TLC_THREADS`,
/// `TLC_CONFIG`, a script's `TLC_PYTHON`) are not, and must not make tlcd
/// refuse to start.
pub(super) const TOP_LEVEL: &[&str] = &[
    "routes",
    "transparent",
    "drain_seconds",
    "handover_socket",
    "peer_sessions",
    "policy",
    "contexts",
    "limits",
    "admin",
    "metrics",
    "log",
    "tls",
    "recovery",
    "allow_destructive",
];

/// Keys whose environment variable is a comma-separated list.
pub(super) const LIST_KEYS: &[&str] = &[
    "policy.parameter_jobs",
    "admin.allowed_hosts",
    "tls.peer_identities",
    "allow_destructive",
];

/// Everything a configuration is made from, short of reading the file.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    /// The TOML file, if any.
    pub file: Option<PathBuf>,
    /// Environment variables that set config keys, by name.
    pub env: BTreeMap<String, String>,
    /// Values from flags, in order.
    pub flags: Vec<FlagValue>,
    /// Values changed through the admin API, by dotted key. `null` unsets
    /// the key (the option is absent whatever lower layers say).
    pub api: BTreeMap<String, serde_json::Value>,
}

/// A configuration and where each of its values came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The validated configuration.
    pub config: Config,
    /// The origin of every leaf value, by dotted key.
    pub sources: BTreeMap<String, Origin>,
    /// The file's text when it was read, to notice changes.
    pub file_text: Option<String>,
}

impl Layers {
    /// Takes from `vars` the ones that set config keys: `TLC_` followed by
    /// a key with `__` between tables (`TLC_DRAIN_SECONDS`,
    /// `TLC_POLICY__PUSH__CODEC`), and `RUST_LOG` for `log.level`.
    /// tlcctl's variables are not tlcd's configuration, `TLC_ADMIN` (which
    /// would name the `[admin]` table) included: see `env_names::check`.
    pub fn env_from(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
        vars.into_iter()
            .filter(|(name, _)| {
                if name == "RUST_LOG" {
                    return true;
                }
                if CLIENT_VARIABLES.contains(&name.as_str()) {
                    return false;
                }
                let Some(key) = name.strip_prefix("TLC_") else {
                    return false;
                };
                let top = key.split("__").next().unwrap_or("").to_lowercase();
                TOP_LEVEL.contains(&top.as_str())
            })
            .collect()
    }

    /// The environment `vars`, as tests write them, taken as
    /// [`Layers::env_from`] takes a process's.
    #[cfg(test)]
    pub(crate) fn env_of(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        Layers::env_from(
            vars.iter()
                .map(|&(name, value)| (name.to_owned(), value.to_owned())),
        )
    }

    /// Layers with nothing set but the environment `vars`.
    #[cfg(test)]
    pub(crate) fn with_env(vars: &[(&str, &str)]) -> Layers {
        Layers {
            env: Layers::env_of(vars),
            ..Layers::default()
        }
    }

    /// Reads the file and merges every layer into a validated configuration.
    pub fn resolve(&self) -> Result<Resolved, ConfigError> {
        let file_text = match &self.file {
            Some(path) => Some(read(path)?),
            None => None,
        };
        self.resolve_with(file_text)
    }

    /// As [`Layers::resolve`], with the file's text already read.
    pub fn resolve_with(&self, file_text: Option<String>) -> Result<Resolved, ConfigError> {
        let file_label = self
            .file
            .as_ref()
            .map_or_else(|| "<file>".to_string(), |p| p.display().to_string());
        let merge_error = |err: config::ConfigError| ConfigError::Parse {
            path: file_label.clone(),
            message: err.to_string().trim().replace('\n', " "),
        };
        let defaults =
            config::Config::try_from(&Config::default()).map_err(|err| ConfigError::Parse {
                path: "<defaults>".into(),
                message: err.to_string(),
            })?;
        let file = file_text
            .as_deref()
            .map(|text| File::from_str(text, FileFormat::Toml));
        let (env, env_names) = self.environment();

        let mut builder = config::Config::builder().add_source(defaults.clone());
        if let Some(file) = &file {
            builder = builder.add_source(file.clone());
        }
        builder = builder.add_source(env.clone());
        for flag in &self.flags {
            builder = builder
                .set_override(flag.key.as_str(), to_value(&flag.value))
                .map_err(|err| invalid_key(&flag.key, &flag.value, err))?;
        }
        for (key, value) in &self.api {
            builder = builder
                .set_override(key.as_str(), to_value(value))
                .map_err(|err| invalid_key(key, value, err))?;
        }
        let merged = builder.build().map_err(merge_error)?;
        let merged_keys = leaf_keys(&collect(&merged)?);
        let config: Config = merged.try_deserialize().map_err(|err| {
            let message = err.to_string().trim().replace('\n', " ");
            // config names the key and, for a file, the file.
            enum_error::rewrite(&message).unwrap_or(ConfigError::Merge { message })
        })?;
        // What each layer gave, as it gave it: the merge above converted
        // what it could.
        let mut given = Vec::new();
        if let Some(file) = &file {
            given.push(strict::file_layer(&collect(file)?));
        }
        given.push(strict::env_layer(&self.env, env_key));
        let typed = |(key, value): (&String, &serde_json::Value)| {
            (key.clone(), strict::Given::Typed(value.clone()))
        };
        given.push(
            self.flags
                .iter()
                .map(|f| typed((&f.key, &f.value)))
                .collect(),
        );
        given.push(self.api.iter().map(typed).collect());
        strict::check(&config, &given)?;
        config.validate()?;

        // Provenance: the highest layer that names each leaf.
        let mut layers: Vec<(Origin, BTreeSet<String>)> = Vec::new();
        layers.push((Origin::Default, leaf_keys(&collect(&defaults)?)));
        if let (Some(file), Some(path)) = (&file, &self.file) {
            layers.push((Origin::File(path.clone()), leaf_keys(&collect(file)?)));
        }
        for (key, name) in leaf_keys(&collect(&env)?)
            .into_iter()
            .filter_map(|key| env_names.get(&key).map(|name| (key, name.clone())))
        {
            layers.push((Origin::Env(name), BTreeSet::from([key])));
        }
        for flag in &self.flags {
            layers.push((
                Origin::Flag(flag.flag.clone()),
                keys_of(&flag.key, &flag.value),
            ));
        }
        for (key, value) in &self.api {
            layers.push((Origin::Api, keys_of(key, value)));
        }
        let mut sources = BTreeMap::new();
        for key in merged_keys {
            let origin = layers
                .iter()
                .rev()
                .find(|(_, keys)| keys.contains(&key) || keys.iter().any(|k| is_parent(k, &key)))
                .map_or(Origin::Default, |(origin, _)| origin.clone());
            sources.insert(key, origin);
        }
        Ok(Resolved {
            config,
            sources,
            file_text,
        })
    }

    /// The environment layer, and the variable behind each key it sets.
    fn environment(&self) -> (Environment, BTreeMap<String, String>) {
        let mut map = Map::new();
        let mut names = BTreeMap::new();
        for (name, value) in &self.env {
            let key = env_key(name);
            names.insert(key.clone(), name.clone());
            // Handed to config under the normalised name, so that RUST_LOG
            // and TLC_LOG__LEVEL are the same key.
            map.insert(
                format!("TLC_{}", key.replace('.', "__").to_uppercase()),
                value.clone(),
            );
        }
        // The `config` crate splits lists only with parsing on; [`strict`]
        // checks each variable's own text against its key's type.
        let mut env = Environment::with_prefix("TLC")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",");
        for key in LIST_KEYS {
            env = env.with_list_parse_key(key);
        }
        (env.source(Some(map)), names)
    }
}

/// The dotted key an environment variable of [`Layers::env_from`] sets.
fn env_key(name: &str) -> String {
    if name == "RUST_LOG" {
        return "log.level".to_string();
    }
    name.strip_prefix("TLC_")
        .unwrap_or(name)
        .to_lowercase()
        .replace("__", ".")
}

/// Reads the config file.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.display().to_string(),
        cause,
    })
}

fn collect(source: &impl Source) -> Result<Map<String, Value>, ConfigError> {
    source.collect().map_err(|err| ConfigError::Merge {
        message: err.to_string().trim().replace('\n', " "),
    })
}

fn invalid_key(key: &str, value: &serde_json::Value, err: config::ConfigError) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.to_string(),
        allowed: format!("a dotted key of the configuration ({err})"),
    }
}

/// Whether `parent` is a table above `key` (`policy.push` above `policy.push.codec`).
fn is_parent(parent: &str, key: &str) -> bool {
    key.len() > parent.len() && key.starts_with(parent) && key.as_bytes()[parent.len()] == b'.'
}

/// Dotted keys of the leaves of a table; arrays are leaves, unset values are not.
pub fn leaf_keys(table: &Map<String, Value>) -> BTreeSet<String> {
    leaves(table).into_keys().collect()
}

/// The leaves of a table by dotted key; arrays are leaves, unset values
/// are not.
pub fn leaves(table: &Map<String, Value>) -> BTreeMap<String, ValueKind> {
    fn walk(prefix: &str, table: &Map<String, Value>, out: &mut BTreeMap<String, ValueKind>) {
        for (name, value) in table {
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match &value.kind {
                ValueKind::Table(inner) => walk(&key, inner, out),
                ValueKind::Nil => {}
                kind => {
                    out.insert(key, kind.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

/// The leaves of a config file's text as tlcd reads it; none for a text
/// that does not parse.
pub fn file_leaves(text: &str) -> BTreeMap<String, ValueKind> {
    collect(&File::from_str(text, FileFormat::Toml))
        .map_or_else(|_| BTreeMap::new(), |table| leaves(&table))
}

/// The leaf keys a value set at `key` covers.
fn keys_of(key: &str, value: &serde_json::Value) -> BTreeSet<String> {
    match value {
        serde_json::Value::Object(map) => map
            .iter()
            .flat_map(|(name, inner)| keys_of(&format!("{key}.{name}"), inner))
            .collect(),
        _ => BTreeSet::from([key.to_string()]),
    }
}

/// A JSON value as the `config` crate holds it.
pub fn to_value(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => ValueKind::Nil,
        serde_json::Value::Bool(b) => ValueKind::Boolean(*b),
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => ValueKind::U64(u),
            (None, Some(i), _) => ValueKind::I64(i),
            (_, _, Some(f)) => ValueKind::Float(f),
            _ => ValueKind::Nil,
        },
        serde_json::Value::String(s) => ValueKind::String(s.clone()),
        serde_json::Value::Array(items) => ValueKind::Array(items.iter().map(to_value).collect()),
        serde_json::Value::Object(map) => {
            ValueKind::Table(map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect())
        }
    };
    Value::new(None, kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    /// Layers with nothing set but the file `f`.
    fn reading(f: &tempfile::NamedTempFile) -> Layers {
        Layers {
            file: Some(f.path().to_owned()),
            ..Layers::default()
        }
    }

    #[test]
    fn each_layer_over_the_one_before() {
        let f =
            file("drain_seconds = 5\n[policy]\nmin_bytes = 1000\n[policy.push]\nsparsity = 1.5\n");
        let mut layers = reading(&f);
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.drain_seconds, 5);
        assert_eq!(r.config.policy.push.sparsity, Some(1.5));
        assert_eq!(
            r.sources["drain_seconds"],
            Origin::File(f.path().to_owned())
        );
        assert_eq!(r.sources["policy.parameter_jobs"], Origin::Default);

        layers.env = Layers::env_of(&[
            ("TLC_POLICY__PUSH__SPARSITY", "1.75"),
            ("TLC_THREADS", "2"),
            ("TLC_PYTHON", "/usr/bin/python3"),
            ("TLC_LOGS", "x"),
            ("HOME", "/root"),
            ("RUST_LOG", "debug"),
        ]);
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.push.sparsity, Some(1.75));
        assert_eq!(r.config.log.level, "debug");
        assert_eq!(
            r.sources["policy.push.sparsity"],
            Origin::Env("TLC_POLICY__PUSH__SPARSITY".into())
        );
        assert_eq!(r.sources["log.level"], Origin::Env("RUST_LOG".into()));
        assert_eq!(
            r.sources["policy.min_bytes"],
            Origin::File(f.path().to_owned())
        );

        layers.flags.push(FlagValue {
            key: "policy.push.sparsity".into(),
            value: json!(1.25),
            flag: "--sparsity".into(),
        });
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.push.sparsity, Some(1.25));
        assert_eq!(
            r.sources["policy.push.sparsity"],
            Origin::Flag("--sparsity".into())
        );

        layers.api.insert("policy.push.sparsity".into(), json!(1.9));
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.push.sparsity, Some(1.9));
        assert_eq!(r.sources["policy.push.sparsity"], Origin::Api);
    }

    #[test]
    fn null_from_the_api_unsets_an_option() {
        let f = file("[policy.push]\nsparsity = 1.5\n");
        let mut layers = reading(&f);
        layers.api.insert("policy.push.codec".into(), json!("int8"));
        let err = layers.resolve().unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.push.sparsity = set: applies only to codec \"3lc\""
        );
        layers
            .api
            .insert("policy.push.sparsity".into(), serde_json::Value::Null);
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.push.codec, "int8");
        assert_eq!(r.config.policy.push.sparsity, None);
    }

    #[test]
    fn arrays_are_replaced_whole() {
        let f = file("[[policy.overrides]]\ntensor = \"*a*\"\nskip = true\n");
        let mut layers = reading(&f);
        assert_eq!(layers.resolve().unwrap().config.policy.overrides.len(), 1);
        layers.api.insert(
            "policy.overrides".into(),
            json!([{"tensor": "*b*", "direction": "push", "sparsity": 1.5}, {"tensor": "*c*", "skip": true}]),
        );
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.overrides.len(), 2);
        assert_eq!(r.config.policy.overrides[0].tensor, "*b*");
        assert_eq!(r.sources["policy.overrides"], Origin::Api);
    }

    #[test]
    fn bad_values_name_the_key_and_the_layer() {
        let layers = Layers::with_env(&[("TLC_POLICY__PULL__SPARSITY", "2.5")]);
        assert_eq!(
            layers.resolve().unwrap_err().to_string(),
            "policy.pull.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"
        );
        let layers = Layers::with_env(&[("TLC_POLICY__PULL__COLOUR", "red")]);
        let err = layers.resolve().unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
        let f = file("[policy.push]\nsparsity = \"lots\"\n");
        let layers = reading(&f);
        let err = layers.resolve().unwrap_err().to_string();
        assert!(err.contains("sparsity"), "{err}");
        let f = file("[admin]\nlisten = \"everywhere\"\n");
        let layers = reading(&f);
        assert_eq!(
            layers.resolve().unwrap_err().to_string(),
            "admin.listen = everywhere: a socket address such as 127.0.0.1:17000, or \"off\""
        );
    }

    #[test]
    fn parameter_jobs_from_the_environment_is_a_list() {
        let layers = Layers::with_env(&[("TLC_POLICY__PARAMETER_JOBS", "ps,chief")]);
        let r = layers.resolve().unwrap();
        assert_eq!(r.config.policy.parameter_jobs, vec!["ps", "chief"]);
    }

    #[test]
    fn the_admin_table_from_the_environment() {
        let layers = Layers::with_env(&[
            ("TLC_ADMIN__TOKEN_FILE", "/run/secrets/tlc/token"),
            ("TLC_ADMIN__ALLOWED_HOSTS", "tlc-admin.ml.svc,10.0.0.5"),
        ]);
        let r = layers.resolve().unwrap();
        assert_eq!(
            r.config.admin.token_file,
            Some(PathBuf::from("/run/secrets/tlc/token"))
        );
        assert_eq!(
            r.config.admin.allowed_hosts,
            vec!["tlc-admin.ml.svc", "10.0.0.5"]
        );
        assert_eq!(
            r.sources["admin.token_file"],
            Origin::Env("TLC_ADMIN__TOKEN_FILE".into())
        );
        // Unset by default: tlcd makes its own token.
        let r = Layers::default().resolve().unwrap();
        assert_eq!(r.config.admin.token_file, None);
    }
}
