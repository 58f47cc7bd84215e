//! `tlcctl check`: a namespace's readiness for tlc's sidecars, asked of
//! the cluster through kubectl. The `kubectl` here is a script answering
//! as kubectl does from files a test writes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::tlcctl;
use serde_json::json;

/// A cluster: its version, the namespace's labels, whether it holds the
/// Secret and the ConfigMap.
struct Cluster {
    minor: &'static str,
    labels: serde_json::Value,
    secret: bool,
    config_map: bool,
}

impl Cluster {
    fn ready() -> Cluster {
        Cluster {
            minor: "31",
            labels: json!({"kubernetes.io/metadata.name": "training"}),
            secret: true,
            config_map: true,
        }
    }

    /// Writes the `kubectl` answering for this cluster into `dir`.
    fn kubectl(&self, dir: &Path) -> String {
        let write = |name: &str, value: serde_json::Value| {
            std::fs::write(dir.join(name), value.to_string()).expect("write");
        };
        write(
            "version.json",
            json!({"clientVersion": {"major": "1", "minor": "31"},
                   "serverVersion": {"major": "1", "minor": self.minor, "gitVersion": format!("v1.{}.2", self.minor)}}),
        );
        write(
            "namespace.json",
            json!({"metadata": {"name": "training", "labels": self.labels}}),
        );
        let secret = if self.secret {
            json!({"data": {"token": "c2VjcmV0"}}).to_string()
        } else {
            String::new()
        };
        let config = if self.config_map {
            json!({"data": {"tlcd.toml": "[policy]\n"}}).to_string()
        } else {
            String::new()
        };
        std::fs::write(dir.join("secret.json"), secret).expect("write");
        std::fs::write(dir.join("configmap.json"), config).expect("write");
        let script = format!(
            r#"#!/bin/bash
case "$*" in
  "version -o json") cat {d}/version.json ;;
  "get namespace training -o json") cat {d}/namespace.json ;;
  "-n training get secret tlc-admin-token --ignore-not-found -o json") cat {d}/secret.json ;;
  "-n training get configmap tlc-config --ignore-not-found -o json") cat {d}/configmap.json ;;
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

    /// `tlcctl check --namespace training`: exit code and stdout.
    fn check(&self) -> (i32, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = tlcctl()
            .args(["check", "--namespace", "training"])
            .env("KUBECTL", self.kubectl(dir.path()))
            .output()
            .expect("run tlcctl");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }
}

#[test]
fn a_ready_namespace_passes_every_check() {
    let (code, out) = Cluster::ready().check();
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(out.lines().all(|l| l.starts_with("ok  ")), "{out}");
}

#[test]
fn each_missing_piece_is_a_failing_line_that_says_what_to_do() {
    let old = Cluster {
        minor: "28",
        ..Cluster::ready()
    };
    let (code, out) = old.check();
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL  Kubernetes v1.28.2: tlc-sidecar is a native sidecar"),
        "{out}"
    );

    let bare = Cluster {
        secret: false,
        config_map: false,
        ..Cluster::ready()
    };
    let (code, out) = bare.check();
    assert_eq!(code, 1);
    assert!(
        out.contains(
            "FAIL  no Secret tlc-admin-token in training: kubectl -n training create secret"
        ),
        "{out}"
    );
    assert!(
        out.contains("FAIL  no ConfigMap tlc-config in training: tlcctl inject --print-config"),
        "{out}"
    );

    let restricted = Cluster {
        labels: json!({"pod-security.kubernetes.io/enforce": "baseline"}),
        ..Cluster::ready()
    };
    let (code, out) = restricted.check();
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL  Pod Security in training: baseline, which refuses tlc-init"),
        "{out}"
    );
}

#[test]
fn istio_injection_is_a_warning() {
    let istio = Cluster {
        labels: json!({"istio-injection": "enabled"}),
        ..Cluster::ready()
    };
    let (code, out) = istio.check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("warn  Istio injects its proxy into training's pods"),
        "{out}"
    );
}
