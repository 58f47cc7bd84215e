//! `tlcctl check`: a namespace's readiness for tlc's sidecars, asked of
//! the cluster through kubectl. The `kubectl` here is a script answering
//! as kubectl does from files a test writes ([`cluster`]), or with
//! kubectl's Forbidden where a test takes the user's rights away.

mod common;

#[path = "check/cluster.rs"]
mod cluster;

use std::path::Path;

use cluster::{line_with, pod, quota, ready, waiting, Cluster, RUNNING};
use serde_json::{json, Value};
#[test]
fn a_ready_namespace_passes_every_check() {
    let (code, out) = Cluster::ready().check();
    assert_eq!(code, 0, "{out}");
    // Version, CRD, meshes, Pod Security, Secret, ConfigMap, quotas,
    // sidecars' health, their image.
    assert_eq!(out.lines().count(), 9, "{out}");
    assert!(out.lines().all(|l| l.starts_with("ok  ")), "{out}");
    assert!(
        out.contains("ok    tlc-sidecar in training: 2 of 2 ready, 0 restart(s)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ok    tlc-sidecar image in training: {RUNNING} (2 pod(s))"
        )),
        "{out}"
    );
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

    let nowhere = Cluster {
        namespace: false,
        ..Cluster::ready()
    };
    let (code, out) = nowhere.check();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL  no namespace training: kubectl create namespace training\n"),
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
}

#[test]
fn a_strict_pod_security_level_points_at_explicit_mode_first() {
    for level in ["baseline", "restricted"] {
        let strict = Cluster {
            labels: json!({"pod-security.kubernetes.io/enforce": level}),
            ..Cluster::ready()
        };
        let (code, out) = strict.check();
        // Explicit mode serves the namespace as it is: not a failure.
        assert_eq!(code, 0, "{out}");
        let line = line_with(&out, "Pod Security in training");
        assert!(
            line.starts_with(&format!(
                "warn  Pod Security in training: {level}, which refuses tlc-init"
            )),
            "{line}"
        );
        let explicit = line.find("tlcctl inject --explicit").expect(line);
        let relabel = line
            .find("pod-security.kubernetes.io/enforce=privileged")
            .expect(line);
        assert!(explicit < relabel, "explicit mode comes first: {line}");
    }

    // Without the TFJob CRD explicit mode has nothing to inject.
    let no_tfjobs = Cluster {
        labels: json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        tfjob_crd: false,
        ..Cluster::ready()
    };
    let (code, out) = no_tfjobs.check();
    assert_eq!(code, 1, "{out}");
    let line = line_with(&out, "Pod Security in training");
    assert!(line.starts_with("FAIL  "), "{line}");
    assert!(line.contains("takes TFJobs only"), "{line}");
    assert!(
        line.contains("label the namespace pod-security.kubernetes.io/enforce=privileged"),
        "{line}"
    );
}

#[test]
fn a_missing_tfjob_crd_is_a_warning() {
    let (_, out) = Cluster::ready().check();
    assert!(
        out.contains("ok    TFJob CRD tfjobs.kubeflow.org installed (serves v1)"),
        "{out}"
    );

    let plain = Cluster {
        tfjob_crd: false,
        ..Cluster::ready()
    };
    let (code, out) = plain.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "TFJob CRD");
    assert!(
        line.starts_with("warn  no TFJob CRD (tfjobs.kubeflow.org): TFJobs and inject --explicit"),
        "{line}"
    );
    assert!(line.contains("plain Deployments"), "{line}");
}

#[test]
fn service_meshes_that_would_capture_the_pods_are_warnings() {
    let (_, out) = Cluster::ready().check();
    assert!(
        out.contains("ok    no service mesh in training (Istio sidecars or ambient, Linkerd)"),
        "{out}"
    );

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

    let ambient = Cluster {
        labels: json!({"istio.io/dataplane-mode": "ambient"}),
        ..Cluster::ready()
    };
    let (code, out) = ambient.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "ambient");
    assert!(
        line.starts_with("warn  Istio ambient mode in training"),
        "{line}"
    );
    assert!(line.contains("istio.io/dataplane-mode: none"), "{line}");
    assert!(!out.contains("no service mesh"), "{out}");

    let linkerd = Cluster {
        annotations: json!({"linkerd.io/inject": "enabled"}),
        ..Cluster::ready()
    };
    let (code, out) = linkerd.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "Linkerd");
    assert!(
        line.starts_with("warn  Linkerd injects its proxy into training's pods"),
        "{line}"
    );
    assert!(line.contains("linkerd.io/inject: disabled"), "{line}");
}

/// Whether every container of the sidecar spec sets a `limits.RESOURCE`,
/// read from the spec itself so that the expectation follows the file.
fn spec_limits(resource: &str) -> bool {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s/components/sidecar/sidecar.yaml");
    let text = std::fs::read_to_string(path).expect("sidecar spec");
    let spec: Value = yaml_serde::from_str(&text).expect("YAML");
    let containers = spec["template"]["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .clone();
    assert!(!containers.is_empty());
    containers
        .iter()
        .all(|c| !c["resources"]["limits"][resource].is_null())
}

#[test]
fn a_quota_on_limits_gets_a_line_on_tlcs_containers_and_room() {
    let (_, out) = Cluster::ready().check();
    assert!(
        out.contains("ok    no ResourceQuota in training constrains cpu or memory"),
        "{out}"
    );

    // Memory: both containers have always set a limit. 3Gi of room is
    // three 1Gi sidecars, whatever the spec's value: read from the line.
    assert!(spec_limits("memory"));
    let memory = Cluster {
        quotas: vec![quota(
            json!({"limits.memory": "8Gi", "pods": "20"}),
            json!({"limits.memory": "5Gi", "pods": "4"}),
        )],
        ..Cluster::ready()
    };
    let (code, out) = memory.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "ResourceQuota");
    assert!(
        line.starts_with(
            "ok    ResourceQuota compute in training constrains limits.memory: tlc's containers \
             set them (tlc-sidecar: limits.memory "
        ),
        "{line}"
    );
    if line.contains("limits.memory 1Gi per pod") {
        assert!(
            line.ends_with("; room for 3 more beside what runs"),
            "{line}"
        );
    }

    let full = Cluster {
        quotas: vec![quota(
            json!({"limits.memory": "8Gi"}),
            json!({"limits.memory": "7900Mi"}),
        )],
        ..Cluster::ready()
    };
    let (code, out) = full.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "ResourceQuota");
    assert!(line.starts_with("warn  "), "{line}");
    assert!(
        line.ends_with("the quota has no room left for one more"),
        "{line}"
    );

    // CPU: the verdict follows whether the spec sets cpu limits.
    let cpu = Cluster {
        quotas: vec![quota(
            json!({"limits.cpu": "64", "requests.cpu": "32"}),
            json!({"limits.cpu": "8", "requests.cpu": "4"}),
        )],
        ..Cluster::ready()
    };
    let (code, out) = cpu.check();
    let line = line_with(&out, "ResourceQuota");
    assert!(
        line.contains("ResourceQuota compute in training constrains limits.cpu, requests.cpu"),
        "{line}"
    );
    if spec_limits("cpu") {
        assert_eq!(code, 0, "{out}");
        assert!(line.starts_with("ok    "), "{line}");
        assert!(line.contains("(tlc-sidecar: limits.cpu "), "{line}");
    } else {
        assert_eq!(code, 1, "{out}");
        assert!(line.starts_with("FAIL  "), "{line}");
        assert!(line.contains("set no limits.cpu"), "{line}");
    }
}

#[test]
fn a_sidecar_not_ready_fails_and_two_images_warn() {
    let crashing = Cluster {
        pods: vec![
            pod("mnist-ps-0", RUNNING, "Running", ready(0)),
            pod(
                "mnist-worker-0",
                RUNNING,
                "Running",
                waiting("CrashLoopBackOff", 7),
            ),
            // Finished pods' sidecars have stopped as they should.
            pod(
                "old-worker-0",
                "registry.example/tlcd:0.0.9",
                "Succeeded",
                json!({"name": "tlc-sidecar", "ready": false, "restartCount": 0,
                       "state": {"terminated": {"reason": "Completed"}}}),
            ),
        ],
        ..Cluster::ready()
    };
    let (code, out) = crashing.check();
    assert_eq!(code, 1, "{out}");
    let line = line_with(&out, "ready");
    assert!(
        line.starts_with(
            "FAIL  tlc-sidecar in training: 1 of 2 ready, 7 restart(s); not ready: \
             mnist-worker-0 (CrashLoopBackOff)"
        ),
        "{line}"
    );
    assert!(
        line.contains("restarted: mnist-worker-0 (7 times)"),
        "{line}"
    );
    assert!(
        out.contains(&format!(
            "ok    tlc-sidecar image in training: {RUNNING} (2 pod(s))"
        )),
        "{out}"
    );

    let running_not_ready = Cluster {
        pods: vec![pod(
            "mnist-ps-0",
            RUNNING,
            "Running",
            json!({"name": "tlc-sidecar", "ready": false, "restartCount": 0,
                   "state": {"running": {}}}),
        )],
        ..Cluster::ready()
    };
    let (code, out) = running_not_ready.check();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAIL  tlc-sidecar in training: 0 of 1 ready, 0 restart(s); not ready: mnist-ps-0"
        ),
        "{out}"
    );

    let mixed = Cluster {
        pods: vec![
            pod("mnist-ps-0", RUNNING, "Running", ready(0)),
            pod("mnist-worker-0", RUNNING, "Running", ready(0)),
            pod(
                "mnist-worker-1",
                "registry.example/tlcd:0.2.0",
                "Running",
                ready(0),
            ),
        ],
        ..Cluster::ready()
    };
    let (code, out) = mixed.check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok    tlc-sidecar in training: 3 of 3 ready, 0 restart(s)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "warn  2 tlc-sidecar images run in training: {RUNNING} (2 pod(s)), \
             registry.example/tlcd:0.2.0 (1 pod(s)); a job's sidecars should run one version"
        )),
        "{out}"
    );
}

#[test]
fn sidecars_starting_or_restarted_are_warnings() {
    let starting = Cluster {
        pods: vec![
            pod("mnist-ps-0", RUNNING, "Running", ready(2)),
            pod(
                "mnist-worker-0",
                RUNNING,
                "Pending",
                waiting("PodInitializing", 0),
            ),
        ],
        ..Cluster::ready()
    };
    let (code, out) = starting.check();
    assert_eq!(code, 0, "{out}");
    let line = line_with(&out, "ready");
    assert!(
        line.starts_with(
            "warn  tlc-sidecar in training: 1 of 2 ready, 2 restart(s); starting: mnist-worker-0; \
             restarted: mnist-ps-0 (2 times)"
        ),
        "{line}"
    );

    let none = Cluster {
        pods: Vec::new(),
        ..Cluster::ready()
    };
    let (code, out) = none.check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("ok    no tlc-sidecar running in training yet\n"),
        "{out}"
    );
}

#[test]
fn a_forbidden_check_is_a_warning_naming_it() {
    let alice = Cluster {
        forbidden: &["crd", "secret", "resourcequota", "pods"],
        ..Cluster::ready()
    };
    let (code, out) = alice.check();
    assert_eq!(code, 0, "{out}");
    for what in [
        "CRD tfjobs.kubeflow.org",
        "Secret tlc-admin-token",
        "ResourceQuotas in training",
        "the running sidecars in training",
    ] {
        assert!(
            out.contains(&format!("warn  cannot check {what}: forbidden (")),
            "{what}: {out}"
        );
    }
    // The checks allowed still run.
    assert!(
        out.contains("ok    ConfigMap tlc-config in training holds tlcd.toml"),
        "{out}"
    );

    // With the CRD unknown, a strict namespace still hears of explicit mode.
    let strict = Cluster {
        labels: json!({"pod-security.kubernetes.io/enforce": "baseline"}),
        forbidden: &["crd", "limitrange"],
        quotas: vec![quota(
            json!({"limits.cpu": "8"}),
            json!({"limits.cpu": "1"}),
        )],
        ..Cluster::ready()
    };
    let (_, out) = strict.check();
    assert!(
        line_with(&out, "Pod Security").starts_with("warn  "),
        "{out}"
    );
    assert!(
        line_with(&out, "Pod Security").contains("--explicit"),
        "{out}"
    );

    let no_namespace = Cluster {
        forbidden: &["namespace"],
        ..Cluster::ready()
    };
    let (code, out) = no_namespace.check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "warn  cannot check namespace training's labels (meshes, Pod Security): forbidden"
        ),
        "{out}"
    );
}

#[test]
fn check_into_a_closed_pipe_does_not_panic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubectl = Cluster::ready().kubectl(dir.path());
    // The reader closes before the first line: every write fails.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("tlcctl"))
        .args(["check", "--namespace", "training"])
        .env("KUBECTL", kubectl)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}
