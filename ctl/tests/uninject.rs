//! `tlcctl uninject`: the manifest as it was before `tlcctl inject`, for
//! every fixture and every way of injecting it, and what it does with a
//! pod injected without a record.

mod common;

use std::path::PathBuf;

use serde_json::Value;

/// The fixtures' folder.
fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject")
}

/// Runs `tlcctl ARGS -` on `stdin`: exit code, stdout, stderr.
fn tlcctl(args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    common::on_stdin(args, stdin)
}

/// The documents of a YAML stream, empty ones left out, as JSON values.
fn parse(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// Every input fixture (not a golden `.out.yaml`), with its text.
fn inputs() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".yaml") && !name.ends_with(".out.yaml")
        })
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("fixture"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn uninject_gives_back_every_fixture_however_it_was_injected() {
    let inputs = inputs();
    assert!(inputs.len() >= 7, "fixtures: {inputs:?}");
    let mut changed = 0;
    for (name, text) in &inputs {
        for flags in [
            &[][..],
            &["--explicit"][..],
            &["--mtls", "--codec", "int8", "--sparsity", "1.5"][..],
            &["--force", "--tf-ports", "2222,2223"][..],
        ] {
            let mut args = vec!["inject"];
            args.extend_from_slice(flags);
            let (code, injected, stderr) = tlcctl(&args, text);
            assert_eq!(code, Some(0), "{name} {flags:?}: {stderr}");
            if injected.contains("tlc-sidecar") {
                changed += 1;
            }
            let (code, back, stderr) = tlcctl(&["uninject"], &injected);
            assert_eq!(code, Some(0), "{name} {flags:?}: {stderr}");
            assert_eq!(stderr, "", "{name} {flags:?}");
            assert_eq!(parse(&back), parse(text), "{name} {flags:?}");
            // Injected twice, taken out once: the same.
            let (_, twice, _) = tlcctl(&args, &injected);
            assert_eq!(
                twice, injected,
                "{name} {flags:?}: injecting twice changed it"
            );
        }
    }
    // Injected: every fixture but the PyTorchJob with no flags and with
    // --mtls, the TFJob alone in explicit mode, every one with --force.
    assert_eq!(changed, 2 * (inputs.len() - 1) + 1 + inputs.len());
    // The golden files, injected once, come back to their inputs too.
    for (name, text) in &inputs {
        let golden = fixtures().join(name.replace(".yaml", ".out.yaml"));
        let Ok(golden) = std::fs::read_to_string(golden) else {
            continue;
        };
        let (code, back, stderr) = tlcctl(&["uninject"], &golden);
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert_eq!(parse(&back), parse(text), "{name}.out.yaml");
    }
}

#[test]
fn what_inject_overwrote_comes_back() {
    let deployment = std::fs::read_to_string(fixtures().join("deployment.yaml")).expect("fixture");
    let (_, injected, _) = tlcctl(&["inject", "-o", "json"], &deployment);
    let injected: Value = serde_json::from_str(&injected).expect("json");
    let spec = &injected["spec"]["template"]["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 40, "raised");
    let (_, back, _) = tlcctl(&["uninject", "-o", "json"], &injected.to_string());
    let back: Value = serde_json::from_str(&back).expect("json");
    assert_eq!(
        back["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        10
    );
    // Explicit mode's wrapper comes off the command.
    let tfjob = std::fs::read_to_string(fixtures().join("tfjob.yaml")).expect("fixture");
    let (_, injected, _) = tlcctl(&["inject", "--explicit", "-o", "json"], &tfjob);
    let injected: Value = serde_json::from_str(&injected).expect("json");
    let ps = &injected["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"];
    assert_eq!(ps["containers"][0]["command"][0], "python3");
    let (_, back, _) = tlcctl(&["uninject", "-o", "json"], &injected.to_string());
    let back: Value = serde_json::from_str(&back).expect("json");
    let ps = &back["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"];
    assert_eq!(
        ps["containers"][0]["command"],
        serde_json::json!(["python", "/opt/train.py"])
    );
    // A volume of the user's named like one of tlc's.
    let meshed = std::fs::read_to_string(fixtures().join("meshed.yaml")).expect("fixture");
    let (_, injected, _) = tlcctl(&["inject", "-o", "json"], &meshed);
    let injected: Value = serde_json::from_str(&injected).expect("json");
    let volumes = &injected["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["name"], "tlc-config");
    let (_, back, _) = tlcctl(&["uninject", "-o", "json"], &injected.to_string());
    let back: Value = serde_json::from_str(&back).expect("json");
    let volumes = &back["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["name"], "my-own-config");
}

#[test]
fn inject_false_on_an_injected_tfjob_and_inject_again_takes_tlc_out() {
    let tfjob = std::fs::read_to_string(fixtures().join("tfjob.yaml")).expect("fixture");
    let (_, injected, _) = tlcctl(&["inject", "--explicit"], &tfjob);
    let opt_out = |text: &str| {
        text.replacen(
            "  name: mnist\n",
            "  name: mnist\n  annotations:\n    tlc.io/inject: 'false'\n",
            1,
        )
    };
    let (code, out, stderr) = tlcctl(&["inject", "--explicit"], &opt_out(&injected));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(parse(&out), parse(&opt_out(&tfjob)));
    for role in ["PS", "Worker"] {
        assert!(
            stderr.contains(&format!(
                "spec.tfReplicaSpecs.{role}.template.spec: tlc taken out (injected before, and \
                 now left without it: tlc.io/inject: \"false\")"
            )),
            "{stderr}"
        );
    }
    // On the pod template itself, after injecting: the same, and uninject
    // keeps the user's "false".
    let on_template = injected.replace("tlc.io/inject: 'true'", "tlc.io/inject: 'false'");
    let (code, out, stderr) = tlcctl(&["inject", "--explicit"], &on_template);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!out.contains("tlc-sidecar"), "{out}");
    let (_, back, _) = tlcctl(&["uninject", "-o", "json"], &on_template);
    let back: Value = serde_json::from_str(&back).expect("json");
    let ps = &back["spec"]["tfReplicaSpecs"]["PS"]["template"];
    assert_eq!(ps["metadata"]["annotations"]["tlc.io/inject"], "false");
    assert!(ps["spec"].get("initContainers").is_none());
}

#[test]
fn a_pod_injected_without_a_record_loses_tlcs_containers_with_a_warning() {
    let pod = std::fs::read_to_string(fixtures().join("pod.out.yaml")).expect("golden");
    // What the Kustomize Component writes: tlc without inject's record.
    let no_record: String = pod
        .lines()
        .filter(|l| !l.contains("tlc.io/injected-changes"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(no_record, pod);
    let (code, out, stderr) = tlcctl(&["uninject", "-o", "json"], &no_record);
    assert_eq!(code, Some(0), "{stderr}");
    let out: Value = serde_json::from_str(&out).expect("json");
    let spec = &out["spec"];
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    assert!(!names(&spec["initContainers"])
        .iter()
        .any(|n| n.starts_with("tlc-")));
    assert!(!names(&spec["volumes"])
        .iter()
        .any(|n| n.starts_with("tlc-")));
    assert!(
        stderr.contains(
            "tlc's containers and volumes taken out; no record of what else inject changed"
        ),
        "{stderr}"
    );
    // Inject leaves such a pod alone when told not to inject it, and says so.
    let off = no_record.replace("tlc.io/inject: 'true'", "tlc.io/inject: 'false'");
    let (code, out, stderr) = tlcctl(&["inject"], &off);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.contains("tlc-sidecar"));
    assert!(
        stderr.contains("`tlcctl uninject` takes them out"),
        "{stderr}"
    );
}

#[test]
fn uninject_leaves_a_manifest_without_tlc_as_it_is() {
    let multi = std::fs::read_to_string(fixtures().join("multi.yaml")).expect("fixture");
    let (code, out, stderr) = tlcctl(&["uninject"], &multi);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    assert_eq!(parse(&out), parse(&multi));
    let (code, out, stderr) = tlcctl(&["uninject"], "a: [1");
    assert_eq!(code, Some(1));
    assert_eq!(out, "");
    assert!(
        stderr.starts_with("tlcctl: error: cannot read stdin: document 1"),
        "{stderr}"
    );
}
