//! The cluster-wide checks: the server's version (native sidecars) and
//! whether the TFJob CRD is installed; and kubectl's current namespace.

use anyhow::{Context, Result};
use serde_json::Value;

use super::{forbidden, get, Answer, Line, Verdict};
use crate::kubectl;

/// The first Kubernetes minor version (1.x) with native sidecars on by
/// default, which `tlc-sidecar` is.
const NATIVE_SIDECARS_MINOR: u64 = 29;

/// The CRD of Kubeflow's TFJob.
const TFJOB_CRD: &str = "tfjobs.kubeflow.org";

/// The TFJob API version `inject` reads and explicit mode writes for.
const TFJOB_VERSION: &str = "v1";

/// The server's version against native sidecars' 1.29.
pub(super) fn server_version() -> Result<Line> {
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
pub(super) fn current_namespace() -> Result<String> {
    let text = kubectl::output(
        None,
        &["config", "view", "--minify", "-o", "jsonpath={..namespace}"],
    )?;
    let ns = text.trim();
    Ok(if ns.is_empty() { "default" } else { ns }.to_string())
}

/// Whether TFJobs can be made here: the line, and `Some(installed)` when
/// known (the Pod Security check's advice depends on it: explicit mode
/// takes TFJobs only).
pub(super) fn tfjob_crd() -> Result<(Line, Option<bool>)> {
    let args = ["get", "crd", TFJOB_CRD, "--ignore-not-found", "-o", "json"];
    Ok(match get(None, &args)? {
        Answer::Found(crd) => {
            let served = crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"] == true)
                .filter_map(|v| v["name"].as_str())
                .collect::<Vec<_>>();
            if served.contains(&TFJOB_VERSION) {
                let line = format!("TFJob CRD {TFJOB_CRD} installed (serves {TFJOB_VERSION})");
                ((Verdict::Ok, line), Some(true))
            } else {
                let line = format!(
                    "TFJob CRD {TFJOB_CRD} installed but serves {} rather than \
                     {TFJOB_VERSION}, which inject writes for",
                    if served.is_empty() {
                        "no version".to_string()
                    } else {
                        served.join(", ")
                    }
                );
                ((Verdict::Warn, line), Some(false))
            }
        }
        Answer::Absent => {
            let line = format!(
                "no TFJob CRD ({TFJOB_CRD}): TFJobs and inject --explicit need Kubeflow's \
                 training operator; plain Deployments, StatefulSets and Jobs still work"
            );
            ((Verdict::Warn, line), Some(false))
        }
        Answer::Forbidden(message) => (forbidden(&format!("CRD {TFJOB_CRD}"), &message), None),
    })
}
