//! Which `TLC_` environment variables tlcd accepts, and the refusal of
//! every other one.
//!
//! A `TLC_` variable is one of: configuration (`TLC_` and a key, `__`
//! between tables: `TLC_POLICY__MIN_BYTES`, `TLC_DRAIN_SECONDS`), read by
//! [`Layers::env_from`](super::layers::Layers::env_from); a variable of
//! tlcd's own flags (`TLC_THREADS`); one of tlcctl's
//! ([`tlc_admin_api::env::CLIENT_VARIABLES`]), which a sidecar's
//! environment often carries; or one the project's scripts read
//! ([`SCRIPT_VARIABLES`]). Anything else is a mistake (`TLC_SPARSITY`,
//! `TLC_CONFG`, `TLC_POLCY__MIN_BYTES`) whose setting would silently not
//! apply: it is refused, with the nearest names that exist.

use std::ffi::OsString;

use serde_json::Value;
use tlc_admin_api::env::CLIENT_VARIABLES;
use tlc_core::ConfigError;

use super::layers::{LIST_KEYS, TOP_LEVEL};
use super::Config;

/// Variables the project's scripts read, which reach tlcd because the
/// scripts start it with their environment: `TLC_PYTHON` (deploy/tf,
/// deploy/local, .ci/run), `TLC_PLOT_PYTHON` (deploy/local/compare),
/// `TLC_LINGER` (deploy/tf/run_with_tlcd.sh), `TLC_PRINT_METRICS`
/// (daemon/tests/metrics.rs). A script that reads a new one adds it here.
pub const SCRIPT_VARIABLES: &[&str] = &[
    "TLC_PYTHON",
    "TLC_PLOT_PYTHON",
    "TLC_LINGER",
    "TLC_PRINT_METRICS",
];

/// How many near names a refusal suggests at most.
const MAX_HINTS: usize = 4;

/// Refuses the first `TLC_` variable in `names` that tlcd does not know.
/// `flags` are the variables tlcd's flags read (`TLC_ADMIN_TOKEN_FILE`,
/// `TLC_THREADS`).
///
/// `TLC_ADMIN` is tlcctl's list of admin APIs: as a tlcd variable it would
/// set the whole `[admin]` table from one string, which means nothing, so
/// tlcctl's meaning wins and tlcd ignores it (`TLC_ADMIN__LISTEN` and the
/// other keys of the table stay tlcd's).
pub fn check<'a>(
    names: impl IntoIterator<Item = &'a str>,
    flags: &[&str],
) -> Result<(), ConfigError> {
    let mut known: Option<Vec<String>> = None;
    for name in names {
        if accepted(name, flags) {
            continue;
        }
        let known = known.get_or_insert_with(|| known_names(flags));
        return Err(ConfigError::Merge {
            message: format!(
                "environment variable {name}: {} (tlcd reads configuration, TLC_ and \
                 the key with tables joined by two underscores as in \
                 TLC_POLICY__PUSH__CODEC or TLC_DRAIN_SECONDS; its flags' variables, {}; \
                 tlcctl's, {}; and the project scripts', {})",
                hint(name, known),
                flags.join(", "),
                CLIENT_VARIABLES.join(", "),
                SCRIPT_VARIABLES.join(", "),
            ),
        });
    }
    Ok(())
}

/// The environment as text. Not `std::env::vars()`, which panics on a
/// variable that is not UTF-8: another program's may be anything, and is
/// left out; tlcd's own (`TLC_`, `RUST_LOG`) must be text.
pub fn utf8(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (name, value) in vars {
        let Ok(name) = name.into_string() else {
            continue;
        };
        match value.into_string() {
            Ok(value) => out.push((name, value)),
            Err(_) if name.starts_with("TLC_") || name == "RUST_LOG" => {
                return Err(ConfigError::Merge {
                    message: format!("environment variable {name}: its value is not UTF-8"),
                })
            }
            Err(_) => {}
        }
    }
    Ok(out)
}

/// Whether tlcd takes `name` as one of its variables, or as someone
/// else's it leaves alone.
fn accepted(name: &str, flags: &[&str]) -> bool {
    let Some(key) = name.strip_prefix("TLC_") else {
        return true;
    };
    if flags.contains(&name) || CLIENT_VARIABLES.contains(&name) || SCRIPT_VARIABLES.contains(&name)
    {
        return true;
    }
    let lower = key.to_ascii_lowercase();
    match lower.split_once("__") {
        // Keys inside a known table are checked by the table's own type
        // (unknown fields are refused there, with the key).
        Some((top, _)) => TOP_LEVEL.contains(&top),
        None => scalar_top_level().contains(&lower),
    }
}

/// Top-level keys that one variable can set: a value, or a list
/// ([`LIST_KEYS`]); not a table, whose keys are set one by one.
fn scalar_top_level() -> Vec<String> {
    let sample = key_sample();
    TOP_LEVEL
        .iter()
        .filter(|key| match sample.get(**key) {
            Some(Value::Object(_)) | Some(Value::Null) | None => false,
            Some(Value::Array(_)) => LIST_KEYS.contains(key),
            Some(_) => true,
        })
        .map(|key| key.to_string())
        .collect()
}

/// Every variable tlcd would accept: configuration leaves as `TLC_` names,
/// then the flags', tlcctl's and the scripts' variables.
fn known_names(flags: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(prefix: &str, value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (name, inner) in map {
                    let key = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}__{name}")
                    };
                    walk(&key, inner, out);
                }
            }
            _ => out.push(format!("TLC_{}", prefix.to_uppercase())),
        }
    }
    walk("", &key_sample(), &mut out);
    out.extend(
        flags
            .iter()
            .chain(CLIENT_VARIABLES)
            .chain(SCRIPT_VARIABLES)
            .map(|s| s.to_string()),
    );
    out
}

/// The defaults with every optional codec key set, so that keys unset by
/// default (`policy.push.sparsity`) are known too.
fn key_sample() -> Value {
    let mut config = Config::default();
    for codec in [
        &mut config.policy.push,
        &mut config.policy.pull,
        &mut config.policy.sparse,
        &mut config.policy.unknown,
    ] {
        codec.sparsity.get_or_insert(1.0);
        codec.k.get_or_insert(25.0);
        codec.seed.get_or_insert(0);
        codec.feedback.get_or_insert(true);
    }
    serde_json::to_value(&config).unwrap_or(Value::Null)
}

/// What `name` was probably meant to be.
fn hint(name: &str, known: &[String]) -> String {
    let key = &name["TLC_".len().min(name.len())..];
    let lower = key.to_ascii_lowercase();
    if let Some((top, _)) = lower.split_once("__") {
        // A misspelt table.
        return match TOP_LEVEL.iter().min_by_key(|t| distance(t, top)) {
            Some(t) if distance(t, top) <= 2 => {
                format!("there is no table '{top}'; did you mean '{t}'?")
            }
            _ => format!("there is no table '{top}'"),
        };
    }
    if TOP_LEVEL.contains(&lower.as_str()) {
        if let Some(Value::Array(_)) = key_sample().get(lower.as_str()) {
            return format!("'{lower}' is a list of tables, set in the file or by flags");
        }
        return format!(
            "'{lower}' is a table: set its keys one by one (TLC_{}__KEY)",
            key.to_ascii_uppercase()
        );
    }
    if let Some(t) = TOP_LEVEL
        .iter()
        .find(|t| lower.starts_with(&format!("{t}_")))
    {
        let joined = format!("TLC_{}__{}", t.to_uppercase(), &key[t.len() + 1..]);
        if known.contains(&joined) {
            return format!("a table and its key are joined by two underscores: {joined}");
        }
    }
    // A misspelt name (TLC_THREAD), or a key without its tables
    // (TLC_SPARSITY): the names closest to it, and those ending in it.
    let upper = name.to_uppercase();
    let mut near: Vec<(usize, &String)> = known
        .iter()
        .filter_map(|k| {
            let tail = match k.rsplit_once("__") {
                Some((_, last)) => last,
                None => k.strip_prefix("TLC_").unwrap_or(k),
            };
            let d = distance(k, &upper).min(distance(tail, key));
            (d <= 2 && d * 3 <= key.len()).then_some((d, k))
        })
        .collect();
    near.sort();
    near.dedup_by(|a, b| a.1 == b.1);
    // The closest only: TLC_THREAD is TLC_THREADS, not whatever else is
    // two letters away.
    let best = near.first().map_or(0, |(d, _)| *d);
    near.retain(|(d, _)| *d == best);
    let names: Vec<&str> = near
        .iter()
        .take(MAX_HINTS)
        .map(|(_, k)| k.as_str())
        .collect();
    match names.as_slice() {
        [] => "tlcd knows no such variable".into(),
        [one] => format!("tlcd knows no such variable; did you mean {one}?"),
        many => format!(
            "tlcd knows no such variable; did you mean one of {}?",
            many.join(", ")
        ),
    }
}

/// The edit distance of two short names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables tlcd's flags read (main.rs's `env =`).
    const FLAGS: &[&str] = &[
        "TLC_CONFIG",
        "TLC_ADMIN_TOKEN_FILE",
        "TLC_LOG_FORMAT",
        "TLC_THREADS",
    ];

    /// Asserts the variable `name` is refused, the message saying each of
    /// `says`.
    fn assert_refused(name: &str, says: &[&str]) {
        let err = check([name], FLAGS).expect_err(name).to_string();
        for said in says {
            assert!(err.contains(said), "{err}");
        }
    }

    #[test]
    fn a_misnamed_environment_table_is_refused() {
        assert_refused(
            "TLC_POLCY__MIN_BYTES",
            &["TLC_POLCY__MIN_BYTES", "did you mean 'policy'"],
        );
        assert_refused("TLC_POLICY_MIN_BYTES", &["TLC_POLICY__MIN_BYTES"]);
        assert_refused("TLC_NONSENSE__X", &["no table 'nonsense'"]);
        // A flag's variable is known only as one.
        assert!(check(["TLC_LOG_FORMAT"], &[]).is_err());
    }

    #[test]
    fn one_word_typos_are_refused_with_the_names_meant() {
        assert_refused("TLC_THREAD", &["did you mean TLC_THREADS?"]);
        assert_refused("TLC_CONFG", &["did you mean TLC_CONFIG?"]);
        assert_refused(
            "TLC_SPARSITY",
            &["TLC_POLICY__PUSH__SPARSITY", "TLC_POLICY__PULL__SPARSITY"],
        );
        assert_refused("TLC_CODEC", &["TLC_POLICY__PUSH__CODEC"]);
        assert_refused("TLC_POLICY", &["'policy' is a table"]);
        assert_refused("TLC_ROUTES", &["'routes' is a list of tables"]);
        assert_refused("TLC_WHATEVER_ELSE", &["tlcd knows no such variable"]);
    }

    /// The `TLC_` names that `text` reads from the environment or sets on
    /// a tlcd: after each of `patterns`.
    fn names_after(text: &str, patterns: &[&str], out: &mut Vec<String>) {
        for pattern in patterns {
            for (at, _) in text.match_indices(pattern) {
                let rest = &text[at + pattern.len()..];
                let len = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(rest.len());
                out.push(format!("TLC_{}", &rest[..len]));
            }
        }
    }

    fn walk(dir: &std::path::Path, patterns: &[&str], out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, patterns, out);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                names_after(&text, patterns, out);
            }
        }
    }

    #[test]
    fn the_projects_own_variables_pass() {
        // What the scripts read from their environment (which the tlcd they
        // start inherits), what the sidecar spec and tlcctl inject set, and
        // what the docs tell users to export.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut names = Vec::new();
        let reads = [
            "${TLC_",
            "environ.get(\"TLC_",
            "var_os(\"TLC_",
            "env::var(\"TLC_",
            "name: TLC_",
            "export TLC_",
        ];
        for dir in ["deploy", ".ci", "scripts", "docs", "daemon/tests"] {
            walk(&root.join(dir), &reads, &mut names);
        }
        names_after(
            &std::fs::read_to_string(root.join("README.md")).unwrap(),
            &reads,
            &mut names,
        );
        walk(&root.join("ctl/src/inject"), &["(\"TLC_"], &mut names);
        names.sort();
        names.dedup();
        // The scan finds what it should.
        for name in ["TLC_PYTHON", "TLC_ADMIN", "TLC_LOG_FORMAT", "TLC_TLS__MODE"] {
            assert!(
                names.iter().any(|n| n == name),
                "{name} not found: {names:?}"
            );
        }
        for name in &names {
            assert!(
                check([name.as_str()], FLAGS).is_ok(),
                "{name} is used by the project but tlcd refuses it: add it to SCRIPT_VARIABLES \
                 (or tlc_admin_api::env::CLIENT_VARIABLES for tlcctl's)"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_text() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(vec![0xff, 0xfe]);
        let vars = utf8([
            ("OTHER".into(), bad()),
            ("TLC_DRAIN_SECONDS".into(), "5".into()),
        ])
        .unwrap();
        assert_eq!(vars, [("TLC_DRAIN_SECONDS".to_string(), "5".to_string())]);
        let err = utf8([("TLC_DRAIN_SECONDS".into(), bad())]).unwrap_err();
        assert!(err.to_string().contains("TLC_DRAIN_SECONDS"), "{err}");
    }

    #[test]
    fn every_known_variable_passes() {
        check(
            [
                "TLC_POLICY__MIN_BYTES",
                "TLC_POLICY__PUSH__SPARSITY",
                "TLC_DRAIN_SECONDS",
                "TLC_HANDOVER_SOCKET",
                "TLC_ALLOW_DESTRUCTIVE",
                "TLC_ADMIN__LISTEN",
                "TLC_TLS__MODE",
                "PATH",
                "RUST_LOG",
            ]
            .into_iter()
            .chain(FLAGS.iter().copied())
            .chain(CLIENT_VARIABLES.iter().copied())
            .chain(SCRIPT_VARIABLES.iter().copied()),
            FLAGS,
        )
        .unwrap();
        assert!(CLIENT_VARIABLES.contains(&"TLC_ADMIN"));
    }
}
