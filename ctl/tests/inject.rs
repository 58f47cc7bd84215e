//! `tlcctl inject`: the manifests it writes, against golden files reviewed
//! by hand, what it takes from the sidecar spec the Kustomize overlays apply
//! too, and what it refuses.

mod common;

use std::path::PathBuf;

use common::{fails, tf_ports, POD};

use common::{tlcctl, IMAGE};
use serde_json::Value;

/// A fixture under `tests/fixtures/inject/`.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inject")
        .join(name)
}

/// Runs `tlcctl inject ARGS` with `stdin` and returns stdout.
fn inject(args: &[&str], stdin: &str) -> String {
    let output = tlcctl()
        .arg("inject")
        .args(args)
        .write_stdin(stdin)
        .output()
        .expect("run tlcctl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "inject {args:?}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// Injects fixture `name` with `flags`, compares with `NAME.out.yaml`, and
/// injects the output again: byte for byte the same.
fn golden(name: &str, flags: &[&str]) {
    let input = fixture(&format!("{name}.yaml"));
    let mut args = flags.to_vec();
    let input_arg = input.to_str().expect("utf-8 path");
    args.push(input_arg);
    let once = inject(&args, "");
    let expected = std::fs::read_to_string(fixture(&format!("{name}.out.yaml"))).expect("golden");
    assert_eq!(
        once, expected,
        "{name}: output differs from {name}.out.yaml"
    );
    let mut again = flags.to_vec();
    again.push("-");
    assert_eq!(
        inject(&again, &once),
        once,
        "{name}: injecting twice changed it"
    );
}

/// One YAML document injected with no flags, as JSON.
fn json_of(yaml: &str) -> Value {
    let out = inject(&["-o", "json", "-"], yaml);
    serde_json::from_str(&out).expect("inject -o json prints JSON")
}

/// The sidecar's environment as `NAME=value` lines.
fn env(spec: &Value) -> Vec<String> {
    let sidecar = &spec["initContainers"][1];
    assert_eq!(sidecar["name"], "tlc-sidecar");
    sidecar["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                e["name"].as_str().unwrap_or(""),
                e["value"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn pod_golden() {
    golden("pod", &[]);
}

#[test]
fn deployment_golden() {
    golden("deployment", &[]);
}

#[test]
fn job_with_mtls_golden() {
    golden("job", &["--mtls"]);
}

#[test]
fn tfjob_every_role_golden() {
    golden("tfjob", &["--sparsity", "1.25"]);
}

/// The sidecar spec, `deploy/k8s/components/sidecar/sidecar.yaml`, as JSON.
fn sidecar_spec() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/k8s/components/sidecar/sidecar.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the sidecar spec");
    yaml_serde::from_str(&text).expect("the sidecar spec is YAML")
}

#[test]
fn what_inject_adds_is_the_sidecar_spec_with_the_pods_settings_on_top() {
    let mut spec = sidecar_spec();
    for container in spec["template"]["spec"]["initContainers"]
        .as_array_mut()
        .expect("init containers")
    {
        container["image"] = IMAGE.into();
    }
    let template = &spec["template"];
    let out = json_of(POD);
    let pod = &out["spec"];
    // tlc-init: the spec's, but for the pod's ports.
    let mut init = template["spec"]["initContainers"][0].clone();
    init["command"][3] = "2222,2223".into();
    assert_eq!(pod["initContainers"][0], init);
    // tlc-sidecar: the spec's without the TLS mount (no --mtls).
    let mut sidecar = template["spec"]["initContainers"][1].clone();
    let mounts = sidecar["volumeMounts"].as_array_mut().expect("mounts");
    mounts.retain(|m| m["name"] != "tlc-tls");
    assert_eq!(pod["initContainers"][1], sidecar);
    let mut volumes = template["spec"]["volumes"].clone();
    let list = volumes.as_array_mut().expect("volumes");
    list.retain(|v| v["name"] != "tlc-tls");
    assert_eq!(pod["volumes"], volumes);
    // The spec's annotations, and the record of what inject changed.
    let mut annotations = out["metadata"]["annotations"].clone();
    let record = annotations
        .as_object_mut()
        .expect("annotations")
        .remove("tlc.io/injected-changes")
        .expect("the record");
    assert!(record
        .as_str()
        .expect("a string")
        .starts_with("{\"annotations\":"));
    assert_eq!(annotations, template["metadata"]["annotations"]);
    assert_eq!(out["metadata"]["labels"], template["metadata"]["labels"]);
    assert_eq!(
        pod["terminationGracePeriodSeconds"],
        template["spec"]["terminationGracePeriodSeconds"]
    );

    // With --mtls and a codec: the TLS volume and mount, required, and the
    // variables after the spec's own; nothing else differs.
    let out: Value = serde_json::from_str(&inject(
        &[
            "-o",
            "json",
            "--mtls",
            "--codec",
            "int8",
            "--tf-ports",
            "2222",
            "-",
        ],
        POD,
    ))
    .expect("json");
    let pod = &out["spec"];
    assert_eq!(
        pod["initContainers"][0],
        template["spec"]["initContainers"][0]
    );
    let mut sidecar = pod["initContainers"][1].clone();
    let env = sidecar["env"].as_array_mut().expect("env");
    let spec_env = template["spec"]["initContainers"][1]["env"]
        .as_array()
        .expect("the spec's env");
    let added: Vec<_> = env
        .drain(spec_env.len()..)
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(
        added,
        [
            "TLC_POLICY__PUSH__CODEC",
            "TLC_POLICY__PULL__CODEC",
            "TLC_TLS__MODE",
            "TLC_TLS__CERT",
            "TLC_TLS__KEY",
            "TLC_TLS__CA"
        ]
    );
    assert_eq!(sidecar, template["spec"]["initContainers"][1]);
    let mut volumes = template["spec"]["volumes"].clone();
    for volume in volumes.as_array_mut().expect("volumes") {
        if volume["name"] == "tlc-tls" {
            volume["secret"]["optional"] = false.into();
        }
    }
    assert_eq!(pod["volumes"], volumes);
}

#[test]
fn multi_document_with_a_service_golden() {
    golden("multi", &["--codec", "fp16"]);
}

#[test]
fn service_passes_through_unchanged() {
    let out = inject(
        &[
            "--codec",
            "fp16",
            fixture("multi.yaml").to_str().expect("path"),
        ],
        "",
    );
    let service = out.split("---\n").nth(1).expect("second document");
    assert_eq!(
        service,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: tf\nspec:\n  clusterIP: None\n  \
         selector:\n    app: tf\n  ports:\n  - port: 2222\n    name: tf\n"
    );
}

#[test]
fn inject_false_skips_the_pod_or_the_whole_object() {
    let skipped = POD.replace(
        "  name: p\n",
        "  name: p\n  annotations:\n    tlc.io/inject: \"false\"\n",
    );
    assert!(!inject(&["-"], &skipped).contains("tlc-"));
    let deployment = std::fs::read_to_string(fixture("deployment.yaml")).expect("fixture");
    let off = deployment.replace(
        "  namespace: training\n",
        "  namespace: training\n  annotations:\n    tlc.io/inject: 'false'\n",
    );
    let out = inject(&["-"], &off);
    assert!(!out.contains("tlc-"), "{out}");
    assert!(out.contains("terminationGracePeriodSeconds: 10\n"), "{out}");
    // "false" on the object wins over the "true" inject wrote on the
    // template, and takes tlc out of a manifest injected before: what comes
    // out is the user's Deployment with the annotation, as if never injected.
    let injected = std::fs::read_to_string(fixture("deployment.out.yaml")).expect("golden");
    let off_again = injected.replace(
        "  namespace: training\n",
        "  namespace: training\n  annotations:\n    tlc.io/inject: 'false'\n",
    );
    let output = tlcctl()
        .args(["inject", "--tf-ports", "9999", "-"])
        .write_stdin(off_again)
        .output()
        .expect("run tlcctl");
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        inject(&["-"], &off)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.template.spec: tlc taken out (injected before, and now left without it: tlc.io/inject: \"false\")"),
        "{stderr}"
    );
}

#[test]
fn host_network_pods_are_left_alone_with_a_warning() {
    let host = POD.replace("spec:\n", "spec:\n  hostNetwork: true\n");
    let output = tlcctl()
        .args(["inject", "-"])
        .write_stdin(host)
        .output()
        .expect("run tlcctl");
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains("tlc-"), "{stdout}");
    assert!(
        stderr.starts_with(
            "tlcctl: warning: stdin: document 1 (Pod p): spec: not injected: a pod on the \
             host's network (hostNetwork: true) cannot have a sidecar"
        ),
        "{stderr}"
    );
}

#[test]
fn skip_ports_from_the_flag_and_the_annotation() {
    let out: Value =
        serde_json::from_str(&inject(&["-o", "json", "--skip-ports", "2223", "-"], POD))
            .expect("json");
    assert_eq!(tf_ports(&out["spec"]), "2222");
    let annotated = POD.replace(
        "  name: p\n",
        "  name: p\n  annotations:\n    tlc.io/skip-ports: \"2222\"\n",
    );
    let out: Value = serde_json::from_str(&inject(
        &["-o", "json", "--skip-ports", "2223", "-"],
        &annotated,
    ))
    .expect("json");
    assert_eq!(tf_ports(&out["spec"]), "2223");
    let line = fails(
        tlcctl()
            .args(["inject", "--skip-ports", "2222,2223", "-"])
            .write_stdin(POD),
    );
    assert!(
        line.contains("document 1 (Pod p)") && line.contains("--skip-ports"),
        "{line}"
    );
}

#[test]
fn annotations_override_flags() {
    let annotated = POD.replace(
        "  name: p\n",
        "  name: p\n  annotations:\n    tlc.io/codec: int8\n    tlc.io/sparsity: \"1.5\"\n    tlc.io/tf-ports: \"4444\"\n",
    );
    let args = [
        "-o",
        "json",
        "--codec",
        "fp16",
        "--sparsity",
        "1.25",
        "--tf-ports",
        "5555",
        "-",
    ];
    let out: Value = serde_json::from_str(&inject(&args, &annotated)).expect("json");
    assert_eq!(tf_ports(&out["spec"]), "4444");
    assert_eq!(
        env(&out["spec"])[2..],
        [
            "TLC_POLICY__PUSH__CODEC=int8",
            "TLC_POLICY__PULL__CODEC=int8",
            "TLC_POLICY__PUSH__SPARSITY=1.5",
            "TLC_POLICY__PULL__SPARSITY=1.5",
        ]
    );
    let out: Value = serde_json::from_str(&inject(&args, POD)).expect("json");
    assert_eq!(tf_ports(&out["spec"]), "5555");
    assert!(env(&out["spec"]).contains(&"TLC_POLICY__PUSH__CODEC=fp16".to_string()));
}

#[test]
fn json_output_parses_and_many_documents_make_a_list() {
    let out = inject(
        &["-o", "json", fixture("multi.yaml").to_str().expect("path")],
        "",
    );
    let list: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    assert_eq!(items[1]["kind"], "Service");
    // Injecting the JSON again changes nothing, and a List's items are injected.
    assert_eq!(inject(&["-o", "json", "-"], &out), out);
    let mut list = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (i, line) in POD.lines().enumerate() {
        list.push_str(if i == 0 { "- " } else { "  " });
        list.push_str(line);
        list.push('\n');
    }
    let out = json_of(&list);
    assert_eq!(tf_ports(&out["items"][0]["spec"]), "2222,2223");
}

#[test]
fn print_config_is_the_config_map() {
    let out = inject(&["--print-config"], "");
    assert!(
        out.starts_with("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tlc-config\n"),
        "{out}"
    );
    assert!(
        out.contains("    [transparent]\n    outbound = \"0.0.0.0:17001\"\n"),
        "{out}"
    );
    // The Kustomize base's file, word for word.
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/k8s/base/tlcd.toml"
    ))
    .unwrap();
    let printed: serde_json::Value =
        yaml_serde::from_str(&out).expect("the printed ConfigMap is YAML");
    assert_eq!(printed["data"]["tlcd.toml"].as_str(), Some(base.as_str()));
}

#[test]
fn malformed_input_names_the_document_and_writes_nothing() {
    let cases: [(&str, &[&str], &str); 6] = [
        ("kind: Service\n---\nkind: Pod\nspec: [1\n", &[], "document 2: not valid YAML"),
        (
            "kind: Service\n---\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec: nope\n",
            &[],
            "document 2 (Deployment d): spec.template.spec: expected a mapping, found a string",
        ),
        (
            "kind: Job\nspec: {}\n",
            &[],
            "document 1 (Job): spec.template: missing",
        ),
        (
            "kind: Pod\nmetadata:\n  annotations: {tlc.io/sparsity: \"2.5\"}\nspec: {}\n",
            &[],
            "metadata.annotations[\"tlc.io/sparsity\"]: ",
        ),
        (
            "kind: Pod\nspec:\n  containers:\n  - name: tensorflow\n    ports:\n    - containerPort: 99999\n",
            &[],
            "spec.containers[0].ports[0].containerPort: not a port number",
        ),
        ("- just\n- a list\n", &[], "document 1: expected a Kubernetes object"),
    ];
    for (input, flags, expected) in cases {
        let output = tlcctl()
            .arg("inject")
            .args(flags)
            .arg("-")
            .write_stdin(input)
            .output()
            .expect("run tlcctl");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{input}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{input}: wrote {:?}",
            output.stdout
        );
        assert!(stderr.contains(expected), "{input}: {stderr}");
    }
    let line = fails(
        tlcctl()
            .args(["inject", "--sparsity", "2", "-"])
            .write_stdin(POD),
    );
    assert!(line.contains("--sparsity"), "{line}");
    let line = fails(
        tlcctl()
            .args(["inject", "--codec", "zip", "-"])
            .write_stdin(POD),
    );
    assert!(line.contains("--codec"), "{line}");
}
