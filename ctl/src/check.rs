//! `tlcctl check`: what a namespace needs before tlc's sidecars can run in
//! it, asked of the cluster through kubectl, one line each, before the
//! first pod fails to start: a Kubernetes with native sidecars, the Secret
//! and ConfigMap the sidecars mount, no Pod Security level that refuses
//! `tlc-init`, and whether Istio would inject its own proxy beside tlc's.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use crate::{admin, inject, kubectl};

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

/// The first Kubernetes minor version (1.x) with native sidecars on by
/// default, which `tlc-sidecar` is.
const NATIVE_SIDECARS_MINOR: u64 = 29;

/// Runs `check`: every line, then exit 1 if any check failed.
pub fn run(args: &CheckArgs) -> Result<()> {
    let ns = args.namespace.as_deref();
    let mut failed = 0;
    let mut report = |verdict: Verdict, line: String| {
        let tag = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => {
                failed += 1;
                "FAIL"
            }
        };
        println!("{tag}  {line}");
    };
    let (verdict, line) = server_version()?;
    report(verdict, line);
    let namespace = match ns {
        Some(ns) => ns.to_string(),
        None => current_namespace()?,
    };
    for (verdict, line) in namespace_labels(&namespace)? {
        report(verdict, line);
    }
    let get = |kind: &str, name: &str| -> Result<Option<Value>> {
        let text = kubectl::output(
            Some(&namespace),
            &["get", kind, name, "--ignore-not-found", "-o", "json"],
        )?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_str(&text).with_context(|| {
            format!("kubectl get {kind} {name}: not JSON")
        })?))
    };
    let secret = admin::TOKEN_SECRET;
    let (verdict, line) = match get("secret", secret)? {
        Some(s) if s["data"]["token"].as_str().is_some_and(|t| !t.is_empty()) => (
            Verdict::Ok,
            format!("Secret {secret} in {namespace} holds a token"),
        ),
        Some(_) => (
            Verdict::Fail,
            format!("Secret {secret} in {namespace} has no key `token`"),
        ),
        None => (
            Verdict::Fail,
            format!(
                "no Secret {secret} in {namespace}: kubectl -n {namespace} create secret generic \
                 {secret} --from-literal=token=$(openssl rand -hex 32)"
            ),
        ),
    };
    report(verdict, line);
    let config = inject::CONFIG_MAP;
    let (verdict, line) = match get("configmap", config)? {
        Some(c) if c["data"]["tlcd.toml"].is_string() => (
            Verdict::Ok,
            format!("ConfigMap {config} in {namespace} holds tlcd.toml"),
        ),
        Some(_) => (
            Verdict::Fail,
            format!("ConfigMap {config} in {namespace} has no key tlcd.toml"),
        ),
        None => (
            Verdict::Fail,
            format!(
                "no ConfigMap {config} in {namespace}: tlcctl inject --print-config | kubectl -n \
                 {namespace} apply -f -"
            ),
        ),
    };
    report(verdict, line);
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    Ok(())
}

/// The server's version against native sidecars' 1.29.
fn server_version() -> Result<(Verdict, String)> {
    let text = kubectl::output(None, &["version", "-o", "json"])?;
    let parsed: Value = serde_json::from_str(&text).context("kubectl version: not JSON")?;
    let server = &parsed["serverVersion"];
    let minor = server["minor"]
        .as_str()
        .map(|m| m.trim_end_matches('+'))
        .and_then(|m| m.parse::<u64>().ok());
    let shown = server["gitVersion"].as_str().unwrap_or("unknown");
    Ok(match (server["major"].as_str(), minor) {
        (Some("1"), Some(minor)) if minor >= NATIVE_SIDECARS_MINOR => (
            Verdict::Ok,
            format!("Kubernetes {shown}: native sidecars (1.{NATIVE_SIDECARS_MINOR} or later)"),
        ),
        (Some(_), Some(_)) => (
            Verdict::Fail,
            format!(
                "Kubernetes {shown}: tlc-sidecar is a native sidecar, which needs 1.{NATIVE_SIDECARS_MINOR} or later"
            ),
        ),
        _ => (Verdict::Warn, "the server's version is unknown".to_string()),
    })
}

/// kubectl's current namespace (`default` when the context names none).
fn current_namespace() -> Result<String> {
    let text = kubectl::output(
        None,
        &["config", "view", "--minify", "-o", "jsonpath={..namespace}"],
    )?;
    let ns = text.trim();
    Ok(if ns.is_empty() { "default" } else { ns }.to_string())
}

/// What the namespace's labels say: Istio's injection, and the Pod
/// Security level `tlc-init` (root, NET_ADMIN, NET_RAW) would meet.
fn namespace_labels(namespace: &str) -> Result<Vec<(Verdict, String)>> {
    let text = kubectl::output(None, &["get", "namespace", namespace, "-o", "json"])?;
    let parsed: Value = serde_json::from_str(&text).context("kubectl get namespace: not JSON")?;
    let labels = &parsed["metadata"]["labels"];
    let mut lines = Vec::new();
    let istio = labels["istio-injection"] == "enabled" || labels["istio.io/rev"].is_string();
    lines.push(if istio {
        (
            Verdict::Warn,
            format!(
                "Istio injects its proxy into {namespace}'s pods; tlc beside Istio is untested: \
                 annotate the job's pods sidecar.istio.io/inject: \"false\""
            ),
        )
    } else {
        (Verdict::Ok, format!("no Istio injection in {namespace}"))
    });
    let level = labels["pod-security.kubernetes.io/enforce"]
        .as_str()
        .unwrap_or("privileged");
    lines.push(match level {
        "privileged" => (
            Verdict::Ok,
            format!(
                "Pod Security in {namespace}: {level} (tlc-init's NET_ADMIN and NET_RAW allowed)"
            ),
        ),
        _ => (
            Verdict::Fail,
            format!(
                "Pod Security in {namespace}: {level}, which refuses tlc-init (root with NET_ADMIN \
                 and NET_RAW to write the redirect); label the namespace \
                 pod-security.kubernetes.io/enforce=privileged, or run the job elsewhere"
            ),
        ),
    });
    Ok(lines)
}
