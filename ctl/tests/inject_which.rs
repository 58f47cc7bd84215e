//! `tlcctl inject`: which pods it takes (those where something says
//! TensorFlow) and on which ports (the ones that signal names), and what
//! it leaves alone with a warning.

mod common;

use common::{tf_ports, POD};

use common::tlcctl;
use serde_json::{json, Value};

/// One YAML document injected with no flags, as JSON.
fn json_of(yaml: &str) -> Value {
    let (out, _) = inject_warned(&["-o", "json"], yaml);
    serde_json::from_str(&out).expect("inject -o json prints JSON")
}

/// Runs `tlcctl inject ARGS -` on `stdin`: stdout and stderr, and it must
/// succeed.
fn inject_warned(args: &[&str], stdin: &str) -> (String, String) {
    let (code, out, stderr) = common::on_stdin(&[&["inject"], args].concat(), stdin);
    assert_eq!(code, Some(0), "inject {args:?}: {stderr}");
    (out, stderr)
}

/// Whether inject left `yaml` as it was (no tlc container added).
fn untouched(out: &str) -> bool {
    !out.contains("tlc-sidecar") && !out.contains("tlc-init")
}

#[test]
fn ports_come_from_what_says_tensorflow() {
    assert_eq!(tf_ports(&json_of(POD)["spec"]), "2222,2223");
    // Only --force takes a pod where nothing says TensorFlow: every port.
    let no_tf = POD.replace("name: tensorflow", "name: main");
    let (out, _) = inject_warned(&["-o", "json", "--force"], &no_tf);
    let out: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(tf_ports(&out["spec"]), "8080,2222,2223");
    let none = "kind: Pod\nspec:\n  containers:\n  - name: main\n";
    let (out, _) = inject_warned(&["-o", "json", "--force"], none);
    let out: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(tf_ports(&out["spec"]), "2222");
    // TF_CONFIG's cluster, not the TensorBoard port beside it.
    let tf_config = r#"
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: trainer
    ports: [{containerPort: 6006}, {containerPort: 5000}]
    env:
    - {name: TF_CONFIG, value: '{"cluster": {"ps": ["ps-0:5000"], "worker": ["w-0:5000"]}}'}
"#;
    assert_eq!(tf_ports(&json_of(tf_config)["spec"]), "5000");
    // A TF1 script's flags.
    let flags = "kind: Pod\nspec:\n  containers:\n  - name: main\n    args: [--ps_hosts=tf-ps:2223, --worker_hosts=tf-w:2224]\n    ports: [{containerPort: 9102}]\n";
    assert_eq!(tf_ports(&json_of(flags)["spec"]), "2223,2224");
}

#[test]
fn workloads_that_are_not_tensorflow_are_left_alone_with_a_warning() {
    for (what, yaml) in [
        ("redis", "kind: Deployment\nmetadata: {name: redis}\nspec:\n  template:\n    spec:\n      containers:\n      - name: redis\n        image: redis:7\n        ports: [{containerPort: 6379}]\n"),
        ("serving", "kind: Deployment\nmetadata: {name: serving}\nspec:\n  template:\n    spec:\n      containers:\n      - name: serving\n        image: tensorflow/serving:2.19.0\n        ports: [{containerPort: 8500}, {containerPort: 8501}]\n"),
    ] {
        let (out, stderr) = inject_warned(&[], yaml);
        assert!(untouched(&out), "{what}: {out}");
        assert!(stderr.contains(&format!("(Deployment {what}): spec.template.spec: not injected: nothing says it runs TensorFlow")), "{what}: {stderr}");
        // The user's word is enough.
        let (out, _) = inject_warned(&["--tf-ports", "6379"], yaml);
        assert!(!untouched(&out), "{what}: --tf-ports did not inject");
    }
}

#[test]
fn a_tfjob_without_parameter_servers_and_pods_that_would_clash_are_left_alone() {
    let worker_only = "\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mwms}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tensorflow/tensorflow:2.21.0
";
    let (out, stderr) = inject_warned(&[], worker_only);
    assert!(untouched(&out), "{out}");
    assert!(stderr.contains("the TFJob has no PS replica"), "{stderr}");
    let (out, _) = inject_warned(&["--force"], worker_only);
    assert!(!untouched(&out));

    let as_sidecar = POD.replace(
        "spec:\n  containers:",
        "spec:\n  securityContext: {runAsUser: 1337}\n  containers:",
    );
    let (out, stderr) = inject_warned(&[], &as_sidecar);
    assert!(untouched(&out), "{out}");
    assert!(stderr.contains("runs as UID 1337"), "{stderr}");

    let clash = POD.replace("containerPort: 8080", "containerPort: 17001");
    let (out, stderr) = inject_warned(&[], &clash);
    assert!(untouched(&out), "{out}");
    assert!(stderr.contains("uses port 17001"), "{stderr}");
}

#[test]
fn a_tfjobs_tensorboard_port_is_not_intercepted() {
    let tfjob = "\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    PS:
      template:
        spec:
          containers:
          - name: tensorflow
            ports: [{containerPort: 6006, name: tensorboard}]
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            ports: [{containerPort: 6006, name: tensorboard}, {containerPort: 5000, name: tfjob-port}]
";
    let out = json_of(tfjob);
    let roles = &out["spec"]["tfReplicaSpecs"];
    assert_eq!(tf_ports(&roles["PS"]["template"]["spec"]), "2222");
    assert_eq!(tf_ports(&roles["Worker"]["template"]["spec"]), "5000");
}

#[test]
fn volcano_jobs_and_katib_experiments_are_read() {
    let volcano = "\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: tf-volcano}
spec:
  minAvailable: 3
  tasks:
  - name: ps
    replicas: 1
    template:
      spec:
        containers:
        - name: tensorflow
          ports: [{containerPort: 2222, name: tfjob-port}]
  - name: worker
    replicas: 2
    template:
      spec:
        containers:
        - name: tensorflow
          ports: [{containerPort: 2222, name: tfjob-port}]
";
    let out = json_of(volcano);
    for task in 0..2 {
        assert_eq!(
            tf_ports(&out["spec"]["tasks"][task]["template"]["spec"]),
            "2222"
        );
    }
    let katib = "\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: tune}
spec:
  trialTemplate:
    primaryContainerName: tensorflow
    trialSpec:
      apiVersion: kubeflow.org/v1
      kind: TFJob
      spec:
        tfReplicaSpecs:
          PS:
            template:
              spec:
                containers:
                - name: tensorflow
          Worker:
            template:
              spec:
                containers:
                - name: tensorflow
";
    let out = json_of(katib);
    let roles = &out["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"];
    assert_eq!(tf_ports(&roles["PS"]["template"]["spec"]), "2222");
    assert_eq!(tf_ports(&roles["Worker"]["template"]["spec"]), "2222");
}

#[test]
fn explicit_mode_needs_no_privilege_and_rewrites_what_tensorflow_dials() {
    let tfjob = "\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  tfReplicaSpecs:
    PS:
      template:
        spec:
          containers:
          - name: tensorflow
            command: [python, -u, /app/train.py]
            ports: [{containerPort: 2222, name: tfjob-port}]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            command: [python, -u, /app/train.py]
";
    let (out, stderr) = inject_warned(&["-o", "json", "--explicit"], tfjob);
    assert!(stderr.is_empty(), "{stderr}");
    let out: Value = serde_json::from_str(&out).expect("json");
    for role in ["PS", "Worker"] {
        let spec = &out["spec"]["tfReplicaSpecs"][role]["template"]["spec"];
        let inits = spec["initContainers"].as_array().expect("init containers");
        assert_eq!(inits.len(), 1, "{role}: only tlc-sidecar");
        assert_eq!(inits[0]["name"], "tlc-sidecar");
        let args: Vec<&str> = inits[0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            args.contains(&"0.0.0.0:17016=127.0.0.1:2222,inbound"),
            "{args:?}"
        );
        assert!(
            args.contains(&"127.0.0.1:17102=mnist-worker-1.$(POD_NAMESPACE).svc:17016,outbound"),
            "{args:?}"
        );
        let command = spec["containers"][0]["command"]
            .as_array()
            .expect("command");
        assert_eq!(command[0], "python3");
        assert_eq!(command[3], "python");
    }
    // The wrapper's Python does what the routes expect, on the TF_CONFIG
    // the operator would give worker 0.
    let wrapper = out["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        ["command"][2]
        .as_str()
        .expect("wrapper")
        .to_string();
    let tf_config = r#"{"cluster": {"worker": ["mnist-worker-0.ml.svc:2222", "mnist-worker-1.ml.svc:2222"], "ps": ["mnist-ps-0.ml.svc:2222"]}, "task": {"type": "worker", "index": 0}}"#;
    if let Ok(output) = std::process::Command::new("python3")
        .args([
            "-c",
            &wrapper,
            "python3",
            "-c",
            "import os; print(os.environ['TF_CONFIG'])",
        ])
        .env("TF_CONFIG", tf_config)
        .output()
    {
        let seen: Value = serde_json::from_slice(&output.stdout).expect("TF_CONFIG as JSON");
        assert_eq!(seen["cluster"]["ps"], json!(["127.0.0.1:17100"]));
        assert_eq!(
            seen["cluster"]["worker"],
            json!(["mnist-worker-0.ml.svc:2222", "127.0.0.1:17102"])
        );
    }
    // A bare Pod has no cluster to route: left alone.
    let (out, stderr) = inject_warned(&["--explicit"], POD);
    assert!(untouched(&out), "{out}");
    assert!(
        stderr.contains("explicit mode (--explicit) takes TFJob replicas only"),
        "{stderr}"
    );
}

#[test]
fn no_image_is_an_error_that_says_how_to_get_one() {
    let output = tlcctl()
        .env_remove("TLC_IMAGE")
        .args(["inject", "-"])
        .write_stdin(POD)
        .output()
        .expect("run tlcctl");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no image: give --image REGISTRY/tlcd:TAG"),
        "{stderr}"
    );
    let output = tlcctl()
        .env_remove("TLC_IMAGE")
        .args(["inject", "--image", "registry.example.com/tlcd:1", "-"])
        .write_stdin(POD)
        .output()
        .expect("run tlcctl");
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("image: registry.example.com/tlcd:1"));
}
