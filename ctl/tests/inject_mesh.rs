//! `tlcctl inject` and service meshes: a pod with tlc never keeps a mesh's
//! proxy or traffic capture (Istio's label and annotation, Istio ambient,
//! Linkerd), each change is said with the key and both values, and the
//! user's own annotations and labels stay.

mod common;

use std::path::PathBuf;

use common::POD;
use serde_json::Value;

/// A fixture under `tests/fixtures/inject/`.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inject")
        .join(name)
}

/// Runs `tlcctl COMMAND -o json ARGS -` on `stdin`, which must succeed:
/// the output as JSON, and stderr.
fn run(command: &str, args: &[&str], stdin: &str) -> (Value, String) {
    let (code, out, stderr) = common::on_stdin(&[&[command, "-o", "json"], args].concat(), stdin);
    assert_eq!(code, Some(0), "{command} {args:?}: {stderr}");
    (serde_json::from_str(&out).expect("JSON"), stderr)
}

#[test]
fn every_mesh_is_turned_off_quietly_on_a_pod_that_asked_for_none() {
    let (out, stderr) = run("inject", &[], POD);
    assert_eq!(stderr, "");
    let annotations = &out["metadata"]["annotations"];
    assert_eq!(annotations["sidecar.istio.io/inject"], "false");
    assert_eq!(annotations["linkerd.io/inject"], "disabled");
    let labels = &out["metadata"]["labels"];
    assert_eq!(labels["sidecar.istio.io/inject"], "false");
    assert_eq!(labels["istio.io/dataplane-mode"], "none");
}

#[test]
fn a_mesh_the_pod_asked_for_is_turned_off_and_each_change_is_said() {
    let meshed = std::fs::read_to_string(fixture("meshed.yaml")).expect("fixture");
    let (out, stderr) = run("inject", &[], &meshed);
    let template = &out["spec"]["template"]["metadata"];
    assert_eq!(template["labels"]["sidecar.istio.io/inject"], "false");
    assert_eq!(template["labels"]["istio.io/dataplane-mode"], "none");
    assert_eq!(template["annotations"]["sidecar.istio.io/inject"], "false");
    assert_eq!(template["annotations"]["linkerd.io/inject"], "disabled");
    // The user's own keys stay, merged with the spec's.
    assert_eq!(template["labels"]["app"], "meshed");
    assert_eq!(template["annotations"]["example.com/owner"], "ml-team");
    // The Deployment's own labels are not the pod's: left as they are.
    assert_eq!(out["metadata"]["labels"]["sidecar.istio.io/inject"], "true");
    let at = "stdin: document 1 (Deployment meshed): spec.template.metadata";
    let expected = [
        format!(
            "{at}.annotations[\"sidecar.istio.io/inject\"]: changed from \"true\" to \"false\" \
             (Istio would add its Envoy sidecar, which runs as UID 1337 like tlcd)"
        ),
        format!(
            "{at}.labels[\"sidecar.istio.io/inject\"]: changed from \"true\" to \"false\" \
             (Istio would add its Envoy sidecar (the label wins over the annotation)"
        ),
        format!(
            "{at}.labels[\"istio.io/dataplane-mode\"]: changed from \"ambient\" to \"none\" \
             (Istio's ambient mode would capture the pod's traffic into ztunnel)"
        ),
        format!(
            "{at}.annotations[\"linkerd.io/inject\"]: changed from \"enabled\" to \"disabled\" \
             (Linkerd would add its proxy"
        ),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{stderr}");
    for (line, want) in lines.iter().zip(&expected) {
        assert!(
            line.starts_with(&format!("tlcctl: warning: {want}")),
            "{line}\nwanted: {want}"
        );
        assert!(
            line.ends_with("the mesh's policies and mTLS no longer apply to it"),
            "{line}"
        );
    }
    // prometheus.io/scrape: "false" of the user's is the spec's "true" now:
    // not a mesh, no line; uninject gives it back (tests/uninject.rs).
    assert_eq!(template["annotations"]["prometheus.io/scrape"], "true");
}

#[test]
fn uninject_gives_the_users_mesh_settings_back() {
    let meshed = std::fs::read_to_string(fixture("meshed.yaml")).expect("fixture");
    let (injected, _) = run("inject", &[], &meshed);
    let (back, stderr) = run("uninject", &[], &injected.to_string());
    assert_eq!(stderr, "");
    let original: Value = yaml_serde::from_str(&meshed).expect("fixture is YAML");
    assert_eq!(back, original);
}

#[test]
fn a_pods_own_annotations_and_labels_are_merged_not_replaced() {
    let pod = POD.replace(
        "  name: p\n",
        "  name: p\n  labels: {team: vision}\n  annotations: {example.com/a: \"1\", tlc.io/codec: int8}\n",
    );
    let (out, _) = run("inject", &[], &pod);
    let metadata = &out["metadata"];
    assert_eq!(metadata["labels"]["team"], "vision");
    assert_eq!(metadata["annotations"]["example.com/a"], "1");
    assert_eq!(metadata["annotations"]["tlc.io/codec"], "int8");
    assert_eq!(metadata["annotations"]["tlc.io/inject"], "true");
    // The user's keys first, where they were; the spec's after them.
    let output = common::tlcctl()
        .args(["inject", "-"])
        .write_stdin(pod)
        .output()
        .expect("run tlcctl");
    let yaml = String::from_utf8_lossy(&output.stdout);
    assert!(
        yaml.contains(
            "  labels:\n    team: vision\n    sidecar.istio.io/inject: 'false'\n    \
             istio.io/dataplane-mode: none\n"
        ),
        "{yaml}"
    );
}
