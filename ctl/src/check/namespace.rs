//! What the namespace's labels and annotations say: the service meshes that
//! would capture its pods' traffic beside tlc's redirect (Istio's sidecar
//! injection, Istio's ambient mode, Linkerd's injection), and the Pod
//! Security level `tlc-init` (root, NET_ADMIN, NET_RAW) would meet.

use anyhow::Result;
use serde_json::Value;

use super::{forbidden, get, Answer, Line, Verdict};

/// The Pod Security label whose level refuses pods (`warn` and `audit`
/// only report).
const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// The namespace's lines: one for the meshes, one for Pod Security.
/// `tfjobs` is whether the TFJob CRD is installed, when known: explicit
/// mode, the way around a strict Pod Security level, takes TFJobs only.
pub(super) fn labels(namespace: &str, tfjobs: Option<bool>) -> Result<Vec<Line>> {
    let args = [
        "get",
        "namespace",
        namespace,
        "--ignore-not-found",
        "-o",
        "json",
    ];
    let parsed = match get(None, &args)? {
        Answer::Found(parsed) => parsed,
        Answer::Absent => {
            return Ok(vec![(
                Verdict::Fail,
                format!("no namespace {namespace}: kubectl create namespace {namespace}"),
            )]);
        }
        Answer::Forbidden(message) => {
            let what = format!("namespace {namespace}'s labels (meshes, Pod Security)");
            return Ok(vec![forbidden(&what, &message)]);
        }
    };
    let labels = &parsed["metadata"]["labels"];
    let annotations = &parsed["metadata"]["annotations"];
    let mut lines = meshes(namespace, labels, annotations);
    lines.push(pod_security(namespace, labels, tfjobs));
    Ok(lines)
}

/// A warning per mesh that would take the pods' traffic, else one ok line.
fn meshes(namespace: &str, labels: &Value, annotations: &Value) -> Vec<Line> {
    let mut lines = Vec::new();
    if labels["istio-injection"] == "enabled" || labels["istio.io/rev"].is_string() {
        lines.push((
            Verdict::Warn,
            format!(
                "Istio injects its proxy into {namespace}'s pods; tlc beside Istio is untested: \
                 tlcctl inject sets the pods' opt-out sidecar.istio.io/inject: \"false\", or \
                 remove the namespace's label"
            ),
        ));
    }
    if labels["istio.io/dataplane-mode"] == "ambient" {
        lines.push((
            Verdict::Warn,
            format!(
                "Istio ambient mode in {namespace} (label istio.io/dataplane-mode=ambient): \
                 ztunnel would capture the pods' traffic beside tlc's redirect; tlcctl inject \
                 sets the pods' opt-out label istio.io/dataplane-mode: none, or remove the \
                 namespace's label"
            ),
        ));
    }
    // Linkerd reads an annotation, on the namespace as on the pod.
    if annotations["linkerd.io/inject"] == "enabled" {
        lines.push((
            Verdict::Warn,
            format!(
                "Linkerd injects its proxy into {namespace}'s pods (annotation \
                 linkerd.io/inject: enabled); tlc beside Linkerd is untested: tlcctl inject sets \
                 the pods' opt-out annotation linkerd.io/inject: disabled, or remove the \
                 namespace's annotation"
            ),
        ));
    }
    if lines.is_empty() {
        lines.push((
            Verdict::Ok,
            format!("no service mesh in {namespace} (Istio sidecars or ambient, Linkerd)"),
        ));
    }
    lines
}

/// The Pod Security level against `tlc-init`, and the way around it.
fn pod_security(namespace: &str, labels: &Value, tfjobs: Option<bool>) -> Line {
    let level = labels[ENFORCE].as_str().unwrap_or("privileged");
    if level == "privileged" {
        return (
            Verdict::Ok,
            format!(
                "Pod Security in {namespace}: {level} (tlc-init's NET_ADMIN and NET_RAW allowed)"
            ),
        );
    }
    let refuses = format!(
        "Pod Security in {namespace}: {level}, which refuses tlc-init (root with NET_ADMIN and \
         NET_RAW to write the redirect)"
    );
    // Explicit mode needs no namespace change, so it comes first; a
    // warning, not a failure, for a namespace it serves.
    match tfjobs {
        Some(false) => (
            Verdict::Fail,
            format!(
                "{refuses}; tlcctl inject --explicit leaves tlc-init out but takes TFJobs only, \
                 and there is no TFJob CRD: label the namespace {ENFORCE}=privileged, or run the \
                 job elsewhere"
            ),
        ),
        _ => (
            Verdict::Warn,
            format!(
                "{refuses}: inject TFJobs with tlcctl inject --explicit (no tlc-init, nothing \
                 privileged), or label the namespace {ENFORCE}=privileged"
            ),
        ),
    }
}
