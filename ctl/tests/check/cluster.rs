//! The cluster `tlcctl check` asks in these tests: a [`Cluster`] writes
//! what kubectl would print into files, and a `kubectl` script that
//! answers each of check's commands from them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};

use crate::common::tlcctl;

/// The image of the sidecars the ready cluster runs.
pub const RUNNING: &str = "registry.example/tlcd:0.1.0";

/// A cluster: its version, the namespace's labels and annotations, and
/// what the namespace holds.
pub struct Cluster {
    /// The server's minor version (1.x).
    pub minor: &'static str,
    /// The namespace's labels.
    pub labels: Value,
    /// The namespace's annotations.
    pub annotations: Value,
    /// Whether the namespace exists; the Secret, the ConfigMap and the
    /// TFJob CRD likewise.
    pub namespace: bool,
    pub secret: bool,
    pub config_map: bool,
    pub tfjob_crd: bool,
    /// The namespace's ResourceQuotas, LimitRanges and pods.
    pub quotas: Vec<Value>,
    pub limit_ranges: Vec<Value>,
    pub pods: Vec<Value>,
    /// The answers (file stems below) kubectl refuses with Forbidden.
    pub forbidden: &'static [&'static str],
}

/// A pod of a TFJob with tlc's native sidecar, as kubectl shows it.
pub fn pod(name: &str, image: &str, phase: &str, sidecar_status: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "training"},
        "spec": {
            "initContainers": [
                {"name": "tlc-init", "image": image},
                {"name": "tlc-sidecar", "image": image, "restartPolicy": "Always"}
            ],
            "containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]
        },
        "status": {
            "phase": phase,
            "initContainerStatuses": [
                {"name": "tlc-init", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"reason": "Completed", "exitCode": 0}}},
                sidecar_status
            ],
            "containerStatuses": [
                {"name": "tensorflow", "ready": true, "restartCount": 0, "state": {"running": {}}}
            ]
        }
    })
}

/// A running, ready sidecar's status.
pub fn ready(restarts: u64) -> Value {
    json!({"name": "tlc-sidecar", "ready": true, "restartCount": restarts,
           "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}})
}

/// A sidecar's status, waiting for `reason`.
pub fn waiting(reason: &str, restarts: u64) -> Value {
    json!({"name": "tlc-sidecar", "ready": false, "restartCount": restarts,
           "state": {"waiting": {"reason": reason}}})
}

/// A ResourceQuota named `compute` with `hard` and `used`.
pub fn quota(hard: Value, used: Value) -> Value {
    json!({"metadata": {"name": "compute", "namespace": "training"},
           "spec": {"hard": hard},
           "status": {"hard": hard, "used": used}})
}

impl Cluster {
    pub fn ready() -> Cluster {
        Cluster {
            minor: "31",
            labels: json!({"kubernetes.io/metadata.name": "training"}),
            annotations: json!({}),
            namespace: true,
            secret: true,
            config_map: true,
            tfjob_crd: true,
            quotas: Vec::new(),
            limit_ranges: Vec::new(),
            pods: vec![
                pod("mnist-ps-0", RUNNING, "Running", ready(0)),
                pod("mnist-worker-0", RUNNING, "Running", ready(0)),
            ],
            forbidden: &[],
        }
    }

    /// Writes the `kubectl` answering for this cluster into `dir`.
    pub fn kubectl(&self, dir: &Path) -> String {
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).expect("write");
        };
        let list = |items: &[Value]| json!({"kind": "List", "items": items}).to_string();
        let present = |yes: bool, value: Value| {
            if yes {
                value.to_string()
            } else {
                String::new()
            }
        };
        write(
            "version.json",
            json!({"clientVersion": {"major": "1", "minor": "31"},
                   "serverVersion": {"major": "1", "minor": self.minor, "gitVersion": format!("v1.{}.2", self.minor)}})
            .to_string(),
        );
        write(
            "namespace.json",
            present(
                self.namespace,
                json!({"metadata": {"name": "training", "labels": self.labels,
                                    "annotations": self.annotations}}),
            ),
        );
        write(
            "secret.json",
            present(self.secret, json!({"data": {"token": "c2VjcmV0"}})),
        );
        write(
            "configmap.json",
            present(
                self.config_map,
                json!({"data": {"tlcd.toml": "[policy]\n"}}),
            ),
        );
        write(
            "crd.json",
            present(
                self.tfjob_crd,
                json!({"metadata": {"name": "tfjobs.kubeflow.org"},
                       "spec": {"versions": [{"name": "v1", "served": true, "storage": true}]}}),
            ),
        );
        write("resourcequota.json", list(&self.quotas));
        write("limitrange.json", list(&self.limit_ranges));
        write("pods.json", list(&self.pods));
        for stem in self.forbidden {
            write(&format!("{stem}.forbidden"), String::new());
        }
        // Forbidden as kubectl prints it: the API server's message, exit 1.
        let script = format!(
            r#"#!/bin/bash
answer() {{
  if [ -e {d}/$1.forbidden ]; then
    echo "Error from server (Forbidden): $1 is forbidden: User \"alice\" cannot get resource \"$1\" in the namespace \"training\"" >&2
    exit 1
  fi
  cat {d}/$1.json
}}
case "$*" in
  "version -o json") answer version ;;
  "get namespace training --ignore-not-found -o json") answer namespace ;;
  "get crd tfjobs.kubeflow.org --ignore-not-found -o json") answer crd ;;
  "-n training get secret tlc-admin-token --ignore-not-found -o json") answer secret ;;
  "-n training get configmap tlc-config --ignore-not-found -o json") answer configmap ;;
  "-n training get resourcequota -o json") answer resourcequota ;;
  "-n training get limitrange -o json") answer limitrange ;;
  "-n training get pods -o json") answer pods ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"#,
            d = dir.display()
        );
        let path = dir.join("kubectl");
        std::fs::write(&path, script).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.to_string_lossy().into_owned()
    }

    /// `tlcctl check --namespace training`: exit code and stdout, with
    /// stderr checked free of panics.
    pub fn check(&self) -> (i32, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = tlcctl()
            .args(["check", "--namespace", "training"])
            .env("KUBECTL", self.kubectl(dir.path()))
            .output()
            .expect("run tlcctl");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("unexpected:"), "{stderr}");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }
}

/// The one line of `out` that contains `part`.
pub fn line_with<'a>(out: &'a str, part: &str) -> &'a str {
    let found: Vec<&str> = out.lines().filter(|l| l.contains(part)).collect();
    assert_eq!(found.len(), 1, "one line with {part:?} in:\n{out}");
    found[0]
}
