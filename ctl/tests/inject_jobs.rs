//! `tlcctl inject` on jobs of several replicas: a TFJob gets tlc on every
//! replica or on none, since a replica with a sidecar and one without
//! cannot talk (in explicit mode, TensorFlow dials its peers' sidecars);
//! and kinds inject does not know (a PyTorchJob) are judged as a
//! Deployment is, not passed over in silence.

mod common;

use std::path::PathBuf;

use serde_json::Value;

/// A fixture under `tests/fixtures/inject/`, as text.
fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inject")
        .join(name);
    std::fs::read_to_string(path).expect("fixture")
}

/// Runs `tlcctl inject ARGS -` on `stdin`: exit code, stdout, stderr.
fn inject(args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    common::on_stdin(&[&["inject"], args].concat(), stdin)
}

/// The fixture TFJob with its PS replica opted out.
fn ps_opted_out() -> String {
    fixture("tfjob.yaml").replacen(
        "    PS:\n      replicas: 1\n      restartPolicy: Never\n      template:\n",
        "    PS:\n      replicas: 1\n      restartPolicy: Never\n      template:\n        \
         metadata:\n          annotations:\n            tlc.io/inject: \"false\"\n",
        1,
    )
}

#[test]
fn a_tfjob_with_a_replica_left_out_is_an_error_naming_it_and_why() {
    let tfjob = ps_opted_out();
    assert!(
        tfjob.contains("tlc.io/inject: \"false\""),
        "fixture changed"
    );
    let (code, stdout, stderr) = inject(&[], &tfjob);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "", "nothing written");
    assert!(
        stderr.starts_with(
            "tlcctl: error: stdin: document 1 (TFJob mnist): TFJob mnist: only some replicas \
             would get tlc (Worker); left without: PS (tlc.io/inject: \"false\")."
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--force to write it anyway"), "{stderr}");

    // A Worker on one of the sidecar's ports, and a PS running as its UID.
    let clash = fixture("tfjob.yaml")
        .replacen("- containerPort: 2222\n", "- containerPort: 17001\n", 2)
        .replacen("- containerPort: 17001\n", "- containerPort: 2222\n", 1);
    let (code, stdout, stderr) = inject(&[], &clash);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(
        stderr.contains(
            "left without: Worker (a container uses port 17001, which the sidecar listens on)"
        ),
        "{stderr}"
    );
    let uid = fixture("tfjob.yaml").replacen(
        "          - name: tensorflow\n",
        "          - name: tensorflow\n            securityContext: {runAsUser: 1337}\n",
        1,
    );
    let (code, _, stderr) = inject(&[], &uid);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("left without: PS (it runs as UID 1337, the sidecar's"),
        "{stderr}"
    );
}

#[test]
fn force_writes_a_partial_tfjob_with_a_warning_naming_what_was_left_out() {
    let (code, stdout, stderr) = inject(&["--force", "-o", "json"], &ps_opted_out());
    assert_eq!(code, Some(0), "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    let roles = &out["spec"]["tfReplicaSpecs"];
    assert!(roles["PS"]["template"]["spec"]
        .get("initContainers")
        .is_none());
    assert_eq!(
        roles["Worker"]["template"]["spec"]["initContainers"][1]["name"],
        "tlc-sidecar"
    );
    assert!(
        stderr.contains(
            "TFJob mnist: only some replicas would get tlc (Worker); left without: PS \
             (tlc.io/inject: \"false\") (--force: written anyway)"
        ),
        "{stderr}"
    );
}

#[test]
fn explicit_mode_never_rewrites_a_job_whose_ps_gets_no_sidecar() {
    for flags in [&["--explicit"][..], &["--explicit", "--force"][..]] {
        let (code, stdout, stderr) = inject(flags, &ps_opted_out());
        assert_eq!(code, Some(1), "{flags:?}: {stderr}");
        assert_eq!(stdout, "", "{flags:?}: nothing written");
        assert!(
            stderr.contains("left without: PS (tlc.io/inject: \"false\"). In explicit mode every task dials its peers' sidecars"),
            "{stderr}"
        );
        assert!(stderr.contains("--force does not change this"), "{stderr}");
    }
    // The whole job opted out is no partial job: written as it is.
    let off = fixture("tfjob.yaml").replacen(
        "  name: mnist\n",
        "  name: mnist\n  annotations: {tlc.io/inject: \"false\"}\n",
        1,
    );
    let (code, stdout, stderr) = inject(&["--explicit"], &off);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("tlc-sidecar"), "{stdout}");
    assert!(
        stdout.contains("- python\n"),
        "command not wrapped: {stdout}"
    );
}

#[test]
fn a_pytorchjob_is_judged_as_a_deployment_is() {
    let job = fixture("pytorchjob.yaml");
    let (code, stdout, stderr) = inject(&["-o", "json"], &job);
    assert_eq!(code, Some(0), "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    let original: Value = yaml_serde::from_str(&job).expect("fixture is YAML");
    assert_eq!(out, original, "left as it is");
    let at = "tlcctl: warning: stdin: document 1 (PyTorchJob resnet): spec.pytorchReplicaSpecs";
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    for (line, replica) in lines.iter().zip(["Master", "Worker"]) {
        assert!(
            line.starts_with(&format!(
                "{at}.{replica}.template.spec: not injected: nothing says it runs TensorFlow"
            )),
            "{line}"
        );
    }
    // The Deployment's warning, word for word after the path.
    let deployment = common::POD.replace("name: tensorflow", "name: main");
    let (_, _, pod_stderr) = inject(&[], &deployment);
    let reason = |s: &str| s.split_once(": not injected: ").map(|(_, r)| r.to_string());
    assert_eq!(reason(lines[0]), reason(pod_stderr.trim_end()));
    // --force injects it as it would a Deployment.
    let (code, stdout, stderr) = inject(&["--force", "-o", "json"], &job);
    assert_eq!(code, Some(0), "{stderr}");
    let out: Value = serde_json::from_str(&stdout).expect("json");
    let spec = &out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["name"], "tlc-init");
}
