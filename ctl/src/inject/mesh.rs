//! Service meshes: a pod with tlc must not get a mesh's proxy or traffic
//! capture too (Istio's Envoy runs as UID 1337, tlcd's, and two sets of
//! redirects in one pod are untested). The sidecar spec's annotations and
//! labels turn each mesh off for the pod; this module says, pod by pod,
//! where that overrode a value of the user's that had turned one on.

use yaml_serde::{Mapping, Value};

use super::error::join;
use super::sidecar::Additions;

/// The annotations and labels that opt a pod in or out of a mesh, and what
/// the mesh would do with it.
const MESH_KEYS: &[(&str, &str, &str)] = &[
    (
        "annotations",
        "sidecar.istio.io/inject",
        "Istio would add its Envoy sidecar, which runs as UID 1337 like tlcd",
    ),
    (
        "labels",
        "sidecar.istio.io/inject",
        "Istio would add its Envoy sidecar (the label wins over the annotation), which runs as \
         UID 1337 like tlcd",
    ),
    (
        "labels",
        "istio.io/dataplane-mode",
        "Istio's ambient mode would capture the pod's traffic into ztunnel",
    ),
    (
        "annotations",
        "linkerd.io/inject",
        "Linkerd would add its proxy and redirect the pod's traffic through it",
    ),
];

/// One line per mesh opt-in of the pod template at `path` that `additions`
/// overwrite, naming the key, both values and why.
pub fn turned_off(template: &Mapping, path: &str, additions: &Additions) -> Vec<String> {
    let mut lines = Vec::new();
    for (which, key, why) in MESH_KEYS {
        let added = if *which == "labels" {
            &additions.labels
        } else {
            &additions.annotations
        };
        let Some(new) = added.get(*key).and_then(Value::as_str) else {
            continue;
        };
        let old = template
            .get("metadata")
            .and_then(|m| m.get(*which))
            .and_then(|m| m.get(*key));
        let Some(old) = old else {
            continue;
        };
        let old_text = match old {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            other => format!("{other:?}"),
        };
        if old_text == new {
            continue;
        }
        lines.push(format!(
            "{}: changed from {old_text:?} to {new:?} ({why}): inject turns every mesh off in a \
             pod with tlc, so the mesh's policies and mTLS no longer apply to it",
            join(&join(&join(path, "metadata"), which), key)
        ));
    }
    lines
}
