//! `tlcctl inject`'s command line and what every pod gets whatever the
//! manifest: `--image` checked as an image reference (the spec's
//! placeholder refused), the admin API's options out of its help, and
//! both tlc containers within a namespace's CPU quota and locked down.

mod common;

use common::POD;
use serde_json::Value;

/// Runs `tlcctl inject --image IMAGE -` on [`POD`]: exit code, stdout, stderr.
fn with_image(image: &str) -> (Option<i32>, String, String) {
    let output = common::tlcctl()
        .env_remove("TLC_IMAGE")
        .args(["inject", "--image", image, "-"])
        .write_stdin(POD)
        .output()
        .expect("run tlcctl");
    common::outcome(&output)
}

#[test]
fn the_image_must_be_an_image_reference_and_not_the_placeholder() {
    let digest = format!("registry.example.com/ml/tlcd@sha256:{}", "0f".repeat(32));
    for good in [
        "registry.example.com/ml/tlcd:0.1.0",
        "localhost:5000/tlcd",
        digest.as_str(),
    ] {
        let (code, out, stderr) = with_image(good);
        assert_eq!(code, Some(0), "{good}: {stderr}");
        assert!(out.contains(&format!("image: {good}\n")), "{good}: {out}");
    }
    for (bad, why) in [
        (
            "ghcr.io/tlc-project/tlcd:0.1.0",
            "is the sidecar spec's placeholder, which no registry serves",
        ),
        ("a b", "contains ' ': not an image reference"),
        (
            "registry.example.com/ML/tlcd:1",
            "lowercase letters and digits",
        ),
        (
            "registry.example.com/tlcd:1@sha256:abc",
            "64 lowercase hexadecimal digits",
        ),
        ("registry.example.com/tlcd:", "tag \"\""),
        ("   ", "empty"),
    ] {
        let (code, out, stderr) = with_image(bad);
        assert_eq!(code, Some(1), "{bad:?} taken: {out}");
        assert_eq!(out, "", "{bad:?}: nothing written");
        assert!(stderr.starts_with("tlcctl: error: --image: "), "{stderr}");
        assert!(stderr.contains(why), "{bad:?}: {stderr}");
    }
    // TLC_IMAGE is checked the same way.
    let output = common::tlcctl()
        .env("TLC_IMAGE", "ghcr.io/tlc-project/tlcd:0.1.0")
        .args(["inject", "-"])
        .write_stdin(POD)
        .output()
        .expect("run tlcctl");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("placeholder"));
}

#[test]
fn inject_and_uninject_help_leave_out_the_admin_apis_options() {
    for command in ["inject", "uninject"] {
        let output = common::tlcctl()
            .args([command, "--help"])
            .output()
            .expect("run tlcctl");
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains("--output <FORMAT>"), "{help}");
        for hidden in [
            "--admin",
            "--timeout",
            "--token-file",
            "--selector",
            "--namespace",
        ] {
            assert!(
                !help.contains(hidden),
                "{command} --help lists {hidden}:\n{help}"
            );
        }
    }
    // The admin commands still take them, before or after their name.
    let output = common::tlcctl()
        .args(["status", "--help"])
        .output()
        .expect("run tlcctl");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("--admin <ADDR>") && help.contains("--token-file"),
        "{help}"
    );
}

#[test]
fn both_containers_have_cpu_limits_and_tlc_init_a_read_only_root() {
    let output = common::tlcctl()
        .env("TLC_IMAGE", "registry.example.com/ml/tlcd:0.1.0")
        .args(["inject", "-o", "json", "-"])
        .write_stdin(POD)
        .output()
        .expect("run tlcctl");
    assert!(output.status.success());
    let out: Value = serde_json::from_slice(&output.stdout).expect("json");
    let inits = out["spec"]["initContainers"]
        .as_array()
        .expect("init containers");
    assert_eq!(inits.len(), 2);
    for container in inits {
        let resources = &container["resources"];
        for kind in ["requests", "limits"] {
            for what in ["cpu", "memory"] {
                assert!(
                    resources[kind][what].is_string(),
                    "{}: no {kind}.{what}",
                    container["name"]
                );
            }
        }
        let security = &container["securityContext"];
        assert_eq!(
            security["allowPrivilegeEscalation"], false,
            "{}",
            container["name"]
        );
        assert_eq!(
            security["readOnlyRootFilesystem"], true,
            "{}",
            container["name"]
        );
    }
}
