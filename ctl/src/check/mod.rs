//! `tlcctl check`: what a namespace needs before tlc's sidecars can run in
//! it, asked of the cluster through kubectl, one line each, before the
//! first pod fails to start: a Kubernetes with native sidecars, the TFJob
//! CRD, the Secret and ConfigMap the sidecars mount, no Pod Security level
//! that refuses `tlc-init` without pointing at explicit mode, no service
//! mesh capturing the pods' traffic beside tlc's ([`namespace`]), room and
//! limits under the namespace's ResourceQuotas ([`quota`]), and how the
//! sidecars already running there fare ([`sidecars`]).
//!
//! A check that kubectl is forbidden to run (RBAC) is a warning naming it,
//! not an error: a user with rights to one namespace still learns the rest.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use crate::{admin, inject, kubectl};

mod cluster;
mod namespace;
mod quantity;
mod quota;
mod sidecars;

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The namespace the training job runs in (default: kubectl's current
    /// one).
    #[arg(long = "namespace", value_name = "NS")]
    namespace: Option<String>,
}

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
type Line = (Verdict, String);

/// What kubectl answered to a `get`.
enum Answer {
    /// The object, or the list.
    Found(Value),
    /// Nothing, with `--ignore-not-found`.
    Absent,
    /// The API server refused the user: kubectl's message, first line.
    Forbidden(String),
}

/// Runs `kubectl [-n NAMESPACE] ARGS` (ending in `-o json`) and parses
/// what it prints; only a Forbidden is an answer rather than an error.
fn get(namespace: Option<&str>, args: &[&str]) -> Result<Answer> {
    let text = match kubectl::output(namespace, args) {
        Ok(text) => text,
        Err(err) => {
            return match err.downcast_ref::<kubectl::Failed>() {
                Some(failed) if failed.forbidden() => {
                    let first = failed.stderr.lines().next().unwrap_or_default();
                    let message = first
                        .strip_prefix("Error from server (Forbidden): ")
                        .unwrap_or(first);
                    Ok(Answer::Forbidden(message.to_string()))
                }
                _ => Err(err),
            };
        }
    };
    if text.trim().is_empty() {
        return Ok(Answer::Absent);
    }
    let value = serde_json::from_str(&text)
        .with_context(|| format!("kubectl {}: not JSON", args.join(" ")))?;
    Ok(Answer::Found(value))
}

/// The objects of `kind` in `namespace` (`kubectl get KIND -o json`): the
/// list, `Null` if there is none, or kubectl's message where the user may
/// not list them.
fn list(namespace: &str, kind: &str) -> Result<std::result::Result<Value, String>> {
    Ok(match get(Some(namespace), &["get", kind, "-o", "json"])? {
        Answer::Found(list) => Ok(list),
        Answer::Absent => Ok(Value::Null),
        Answer::Forbidden(message) => Err(message),
    })
}

/// The warning for a check kubectl was forbidden to run.
fn forbidden(what: &str, message: &str) -> Line {
    (
        Verdict::Warn,
        format!("cannot check {what}: forbidden ({message})"),
    )
}

/// The report on stdout, counting failures. Written with `?` rather than
/// `println!`, which panics when `tlcctl check | head -1` closes the pipe.
struct Report {
    out: std::io::StdoutLock<'static>,
    failed: usize,
}

impl Report {
    fn line(&mut self, (verdict, line): Line) -> Result<()> {
        let tag = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => {
                self.failed += 1;
                "FAIL"
            }
        };
        // Flushed line by line: each check waits on kubectl, and a user
        // watching should see the ones done.
        writeln!(self.out, "{tag}  {line}")
            .and_then(|()| self.out.flush())
            .context("cannot write to stdout")
    }

    fn lines(&mut self, lines: Vec<Line>) -> Result<()> {
        lines.into_iter().try_for_each(|line| self.line(line))
    }
}

/// Runs `check`: every line, then exit 1 if any check failed.
pub fn run(args: &CheckArgs) -> Result<()> {
    let mut report = Report {
        out: std::io::stdout().lock(),
        failed: 0,
    };
    report.line(cluster::server_version()?)?;
    let namespace = match args.namespace.as_deref() {
        Some(ns) => ns.to_string(),
        None => cluster::current_namespace()?,
    };
    let (line, tfjobs) = cluster::tfjob_crd()?;
    report.line(line)?;
    report.lines(namespace::labels(&namespace, tfjobs)?)?;
    report.line(secret(&namespace)?)?;
    report.line(config_map(&namespace)?)?;
    report.lines(quota::check(&namespace)?)?;
    report.lines(sidecars::check(&namespace)?)?;
    if report.failed > 0 {
        bail!("{} check(s) failed", report.failed);
    }
    Ok(())
}

/// The Secret with the admin token the sidecars mount.
fn secret(namespace: &str) -> Result<Line> {
    let secret = admin::TOKEN_SECRET;
    let args = ["get", "secret", secret, "--ignore-not-found", "-o", "json"];
    Ok(match get(Some(namespace), &args)? {
        Answer::Found(s) if s["data"]["token"].as_str().is_some_and(|t| !t.is_empty()) => (
            Verdict::Ok,
            format!("Secret {secret} in {namespace} holds a token"),
        ),
        Answer::Found(_) => (
            Verdict::Fail,
            format!("Secret {secret} in {namespace} has no key `token`"),
        ),
        Answer::Absent => (
            Verdict::Fail,
            format!(
                "no Secret {secret} in {namespace}: kubectl -n {namespace} create secret generic \
                 {secret} --from-literal=token=$(openssl rand -hex 32)"
            ),
        ),
        Answer::Forbidden(message) => forbidden(&format!("Secret {secret}"), &message),
    })
}

/// The ConfigMap with `tlcd.toml` the sidecars mount.
fn config_map(namespace: &str) -> Result<Line> {
    let config = inject::CONFIG_MAP;
    let args = [
        "get",
        "configmap",
        config,
        "--ignore-not-found",
        "-o",
        "json",
    ];
    Ok(match get(Some(namespace), &args)? {
        Answer::Found(c) if c["data"]["tlcd.toml"].is_string() => (
            Verdict::Ok,
            format!("ConfigMap {config} in {namespace} holds tlcd.toml"),
        ),
        Answer::Found(_) => (
            Verdict::Fail,
            format!("ConfigMap {config} in {namespace} has no key tlcd.toml"),
        ),
        Answer::Absent => (
            Verdict::Fail,
            format!(
                "no ConfigMap {config} in {namespace}: tlcctl inject --print-config | kubectl -n \
                 {namespace} apply -f -"
            ),
        ),
        Answer::Forbidden(message) => forbidden(&format!("ConfigMap {config}"), &message),
    })
}
