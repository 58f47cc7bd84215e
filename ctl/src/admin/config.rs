//! `tlcctl config get|set` and `tlcctl reload`: tlcd's effective
//! configuration as dotted keys, where each value came from, and changes
//! by key.

use anyhow::{bail, Result};
use clap::Subcommand;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use tlc_admin_api::{paths, ConfigPatch, ConfigView};

use super::client::Method;
use super::format::NONE;
use super::output;
use super::Ctx;
use crate::table;

/// The `config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print every configuration value (or those under KEY) and its source.
    #[command(after_help = "\
KEY is dotted, as in the config file: `policy.push.sparsity`, or a table
such as `policy.push` for every key under it. Arrays are one value each,
shown as compact JSON. SOURCE is default, file PATH, env NAME, flag --NAME
or api (changed with `tlcctl config set` or `tlcctl set`).")]
    Get {
        /// Only this key, or the keys under this table.
        #[arg(value_name = "KEY")]
        key: Option<String>,
    },
    /// Change configuration values on every target.
    #[command(after_help = "\
VALUE is read as JSON if it is JSON (1.75, true, [\"a\"], {\"k\": 1}) and as a
string otherwise (3lc); quote a JSON string to force one ('\"true\"'). KEY=null
removes the value set through the API, so the file, environment, flag or
default applies again. tlcd checks the whole result before changing anything
and refuses keys that cannot change while it runs.")]
    Set {
        /// One or more KEY=VALUE.
        #[arg(value_name = "KEY=VALUE", required = true, value_parser = parse_assignment)]
        assignments: Vec<(String, Value)>,
    },
}

/// Runs a `config` subcommand.
pub fn run(ctx: &Ctx, command: ConfigCommand) -> Result<()> {
    match command {
        ConfigCommand::Get { key } => get(ctx, key.as_deref()),
        ConfigCommand::Set { assignments } => set(ctx, &assignments),
    }
}

/// Runs `reload`.
pub fn reload(ctx: &Ctx) -> Result<()> {
    let outcomes = ctx.call_all(Method::Post, paths::RELOAD, None);
    // The answer is the configuration reloaded; only that it came counts.
    output::report_change::<IgnoredAny>(&outcomes, ctx.format, |_| "reloaded".to_string())
}

fn get(ctx: &Ctx, key: Option<&str>) -> Result<()> {
    let mut outcomes = ctx.call_all(Method::Get, paths::CONFIG, None);
    if let Some(key) = key {
        for outcome in &mut outcomes {
            if let Ok(body) = &outcome.answer {
                outcome.answer = output::read::<ConfigView>(body)
                    .map_err(|why| {
                        format!("the answer is not in the shape this tlcctl reads ({why})")
                    })
                    .and_then(|view| only(&view, key))
                    .and_then(|cut| {
                        serde_json::to_value(cut).map_err(|e| format!("configuration: {e}"))
                    });
            }
        }
    }
    output::show(&outcomes, ctx.format, |answers| {
        let rows = answers
            .iter()
            .flat_map(|(target, view)| {
                let leaves = view.iter().flat_map(leaves);
                leaves.map(move |(key, value, source)| (*target, vec![key, value, source]))
            })
            .collect();
        let columns = table::columns(&["KEY", "VALUE", "SOURCE"], &[]);
        output::target_table(&columns, rows, ctx.targets.len() > 1)
    })
}

fn set(ctx: &Ctx, assignments: &[(String, Value)]) -> Result<()> {
    let mut patch = ConfigPatch::new();
    for (key, value) in assignments {
        if patch.insert(key.clone(), value.clone()).is_some() {
            bail!("{key} is given twice");
        }
    }
    let body = serde_json::to_value(&patch)?;
    let outcomes = ctx.call_all(Method::Patch, paths::CONFIG, Some(&body));
    // The answer is the new configuration: show what each key is now and
    // where that comes from, which for a removed key is the layer below.
    output::report_change::<ConfigView>(&outcomes, ctx.format, |view| {
        let Some(view) = view else {
            return String::new();
        };
        assignments
            .iter()
            .map(|(key, _)| now(view, key))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `KEY = VALUE from SOURCE` after a change.
fn now(view: &ConfigView, key: &str) -> String {
    match lookup(view, key) {
        Some(value) => format!("{key} = {} from {}", show(value), source(view, key)),
        None => format!("{key} unset"),
    }
}

/// Parses `KEY=VALUE`; only the shape is checked, the daemon judges the
/// rest.
fn parse_assignment(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(format!("{text:?}: the key must be a dotted name"));
    }
    let value =
        serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

/// The value at a dotted key of a `/v1/config` answer.
fn lookup<'a>(view: &'a ConfigView, key: &str) -> Option<&'a Value> {
    key.split('.')
        .try_fold(&view.config, |node, part| node.get(part))
}

/// Where `key`'s value came from: its own entry in `sources`, else the
/// nearest enclosing key's (an array counts as one value).
fn source(view: &ConfigView, key: &str) -> String {
    let mut key = key;
    loop {
        if let Some(source) = view.sources.get(key) {
            return source.clone();
        }
        match key.rsplit_once('.') {
            Some((parent, _)) => key = parent,
            None => return NONE.to_string(),
        }
    }
}

/// A `/v1/config` answer cut down to `key` and what is under it (sources
/// also of the keys enclosing it), in the same shape so
/// `.config.policy.push.sparsity` reads the same either way.
fn only(view: &ConfigView, key: &str) -> Result<ConfigView, String> {
    let value = lookup(view, key)
        .ok_or_else(|| format!("tlcd's configuration has no key {key}"))?
        .clone();
    let config = key.rsplit('.').fold(value, |inner, part| {
        Value::Object(Map::from_iter([(part.to_string(), inner)]))
    });
    let prefix = format!("{key}.");
    let sources = view
        .sources
        .iter()
        .filter(|(k, _)| {
            // Enclosing keys too: their source is the one of what is under
            // them when nothing more precise is given.
            *k == key || k.starts_with(&prefix) || key.starts_with(&format!("{k}."))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(ConfigView { config, sources })
}

/// Every leaf of the answer's `config` as (dotted key, shown value, source).
fn leaves(view: &ConfigView) -> Vec<(String, String, String)> {
    fn walk(prefix: &str, node: &Value, out: &mut Vec<(String, Value)>) {
        match node {
            Value::Object(map) if !map.is_empty() => {
                for (name, child) in map {
                    let key = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    walk(&key, child, out);
                }
            }
            leaf => out.push((prefix.to_string(), leaf.clone())),
        }
    }
    let mut flat = Vec::new();
    walk("", &view.config, &mut flat);
    flat.into_iter()
        .map(|(key, value)| {
            let source = source(view, &key);
            (key, show(&value), source)
        })
        .collect()
}

/// Strings bare (they read as typed with `config set`), the rest as
/// compact JSON.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body() -> ConfigView {
        output::read(&json!({
            "config": {"drain_seconds": 30, "routes": [{"listen": "a"}],
                       "policy": {"min_bytes": 65536, "overrides": [],
                                  "push": {"codec": "3lc", "sparsity": 1.75}}},
            "sources": {"drain_seconds": "default", "policy.push.sparsity": "api",
                        "policy": "file /etc/tlc/tlcd.toml", "policy.pushy": "default"}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn flattens_with_sources() {
        let leaves = leaves(&body());
        let find = |k: &str| leaves.iter().find(|l| l.0 == k).cloned();
        assert_eq!(
            find("routes").map(|l| l.1),
            Some(r#"[{"listen":"a"}]"#.into())
        );
        assert_eq!(find("policy.overrides").map(|l| l.1), Some("[]".into()));
        assert_eq!(
            find("policy.push.codec").map(|l| l.2),
            Some("file /etc/tlc/tlcd.toml".into())
        );
        assert_eq!(
            find("policy.push.sparsity").map(|l| (l.1, l.2)),
            Some(("1.75".into(), "api".into()))
        );
        assert_eq!(find("routes").map(|l| l.2), Some("-".into()));
    }

    #[test]
    fn filters_to_a_subtree() {
        let cut = only(&body(), "policy.push").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cut.config,
            json!({"policy": {"push": {"codec": "3lc", "sparsity": 1.75}}})
        );
        assert_eq!(
            serde_json::to_value(&cut.sources).unwrap_or_default(),
            json!({"policy.push.sparsity": "api", "policy": "file /etc/tlc/tlcd.toml"})
        );
        assert!(only(&body(), "policy.pus").is_err());
        assert!(only(&body(), "nope").is_err());
    }

    #[test]
    fn assignments() {
        let parse = |t| parse_assignment(t).map(|(k, v)| (k, v.to_string()));
        assert_eq!(parse("a.b=1.75"), Ok(("a.b".into(), "1.75".into())));
        assert_eq!(parse("a=3lc"), Ok(("a".into(), r#""3lc""#.into())));
        assert_eq!(parse("a=null"), Ok(("a".into(), "null".into())));
        assert_eq!(parse("a=[1,2]"), Ok(("a".into(), "[1,2]".into())));
        assert_eq!(parse("a="), Ok(("a".into(), r#""""#.into())));
        assert_eq!(parse("a=x=y"), Ok(("a".into(), r#""x=y""#.into())));
        assert!(parse("a").is_err());
        assert!(parse("=1").is_err());
    }
}
