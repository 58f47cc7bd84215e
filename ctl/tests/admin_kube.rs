//! `--selector`: tlcctl reaches every sidecar of a job in Kubernetes
//! through `kubectl` (`get pods`, `get secret`, one `port-forward` per
//! pod). The `kubectl` here is a script that answers as kubectl does, from
//! a pod list and with port-forwards to fake admin APIs; what only a real
//! cluster can show (kubectl's own port-forward, RBAC) is in README.

mod common;
mod fake_admin;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use fake_admin::tlcctl::run_env;
use fake_admin::{status, FakeAdmin, Reply};
use serde_json::json;

const TOKEN: &str = "secret-token-0123456789abcdef";

/// Writes a `kubectl` into `dir` that lists `pods` (JSON), answers the
/// Secret with `token` (none if empty), and port-forwards `pod/NAME` to
/// the port in `dir/port-NAME`; every call's arguments go to `dir/calls`.
fn fake_kubectl(dir: &Path, pods: &serde_json::Value, token: &str) -> String {
    std::fs::write(dir.join("pods.json"), pods.to_string()).expect("pods");
    let script = format!(
        r#"#!/bin/bash
echo "$*" >> {dir}/calls
case "$*" in
  *"get pods"*) cat {dir}/pods.json ;;
  *"get secret"*) printf '%s' '{token}' ;;
  *port-forward*)
    for a in "$@"; do case $a in pod/*) pod=${{a#pod/}} ;; esac; done
    echo "Forwarding from 127.0.0.1:$(cat {dir}/port-$pod) -> 17000"
    exec sleep 30 ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"#,
        dir = dir.display()
    );
    let path = dir.join("kubectl");
    std::fs::write(&path, script).expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_string_lossy().into_owned()
}

fn pod(name: &str, phase: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "training"},
        "spec": {"initContainers": [{"name": "tlc-init"}, {"name": "tlc-sidecar"}],
                 "containers": [{"name": "tensorflow"}]},
        "status": {"phase": phase},
    })
}

fn guarded() -> FakeAdmin {
    let token = Arc::new(Mutex::new(TOKEN.to_string()));
    FakeAdmin::with_token(token, |request, _| match request.path_only() {
        "/v1/status" => Reply::json(200, status(10, 1)),
        _ => Reply::json(404, json!({"error": "no such endpoint"})),
    })
}

#[test]
fn every_sidecar_of_the_selected_pods_is_reached_with_the_secrets_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ps, worker) = (guarded(), guarded());
    for (name, server) in [("ps-0", &ps), ("worker-0", &worker)] {
        let port = server.addr().rsplit_once(':').expect("port").1;
        std::fs::write(dir.path().join(format!("port-{name}")), port).expect("port");
    }
    let pods = json!({"items": [pod("ps-0", "Running"), pod("worker-0", "Running"), pod("worker-1", "Pending")]});
    let kubectl = fake_kubectl(dir.path(), &pods, TOKEN);
    let (code, stdout, stderr) = run_env(
        &[
            "-o",
            "json",
            "status",
            "-l",
            "job=mnist",
            "--namespace",
            "training",
        ],
        &[("KUBECTL", &kubectl)],
    );
    assert_eq!(code, 0, "{stderr}");
    let answers: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let labels: Vec<&str> = answers["results"]
        .as_array()
        .expect("one answer per sidecar")
        .iter()
        .filter_map(|a| a["target"].as_str())
        .collect();
    assert_eq!(labels, ["training/ps-0", "training/worker-0"], "{stdout}");
    assert_eq!(ps.requests().len(), 1);
    assert_eq!(worker.requests().len(), 1);
    let calls = std::fs::read_to_string(dir.path().join("calls")).expect("calls");
    assert!(
        calls.contains("-n training get pods -l job=mnist -o json"),
        "{calls}"
    );
    assert!(calls.contains("port-forward pod/ps-0 :17000"), "{calls}");
    assert!(
        !calls.contains("pod/worker-1"),
        "a pending pod was dialled: {calls}"
    );
}

#[test]
fn no_secret_and_no_pod_are_each_one_clear_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = guarded();
    let port = server.addr().rsplit_once(':').expect("port").1;
    std::fs::write(dir.path().join("port-ps-0"), port).expect("port");
    let kubectl = fake_kubectl(dir.path(), &json!({"items": [pod("ps-0", "Running")]}), "");
    let (code, _, stderr) = run_env(&["status", "-l", "job=mnist"], &[("KUBECTL", &kubectl)]);
    assert_eq!(code, 1);
    assert!(stderr.contains("training/ps-0"), "{stderr}");
    assert!(stderr.contains("no Secret tlc-admin-token"), "{stderr}");

    let kubectl = fake_kubectl(
        dir.path(),
        &json!({"items": [pod("ps-0", "Pending")]}),
        TOKEN,
    );
    let (code, _, stderr) = run_env(
        &["status", "-l", "job=mnist", "--namespace", "training"],
        &[("KUBECTL", &kubectl)],
    );
    assert_eq!(code, 1);
    assert_eq!(
        stderr.trim(),
        "tlcctl: error: no running pod with a tlc-sidecar container matches -l job=mnist in namespace training"
    );
}
