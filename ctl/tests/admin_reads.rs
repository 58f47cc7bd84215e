//! `status`, `config get`, `tensors` and `log-level` against a fake admin
//! API: the request sent, and the table and JSON made of the answer.

mod common;
mod fake_admin;

use fake_admin::tlcctl::{cells, parse_json, run, words};
use fake_admin::{status, tensor, FakeAdmin};
use serde_json::{json, Value};

#[test]
fn status_table_has_one_row_per_target() {
    let a = FakeAdmin::answering("GET", "/v1/status", status(251658240, 2893212));
    let b = FakeAdmin::answering("GET", "/v1/status", status(0, 0));
    let (code, stdout, stderr) = run(&["status", "--admin", a.addr(), "--admin", b.addr()]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert_eq!(
        words(lines[0]),
        [
            "TARGET",
            "READY",
            "PUSH CODEC",
            "PULL CODEC",
            "PUSH RATIO",
            "PULL RATIO",
            "TENSORS",
            "DECODE FAILURES",
            "FALLBACKS",
            "UPTIME"
        ]
    );
    assert_eq!(
        words(lines[1]),
        [
            a.addr(),
            "yes",
            "3lc s=1.00",
            "3lc s=1.00",
            "87.0x",
            "58.5x",
            "240",
            "3",
            "1",
            "1m21s"
        ]
    );
    assert!(lines[2].starts_with(b.addr()), "{stdout}");
    // Below the table, each target's training run.
    assert_eq!(
        lines[3],
        format!("{}: training: global step 99, advanced 0s ago", a.addr())
    );
    assert!(lines[4].starts_with(&format!("{}: training:", b.addr())));
    assert_eq!(a.only_request_to("GET", "/v1/status").body, "");
}

#[test]
fn status_shows_the_sessions_with_peers() {
    let mut with_sessions = status(251658240, 2893212);
    with_sessions["totals"]["sessions"] = serde_json::json!({
        "opened": 2, "refused": 0, "served": 0, "broken": 1,
        "calls": 1918, "calls_on_streams": 3
    });
    let a = FakeAdmin::answering("GET", "/v1/status", with_sessions);
    let (code, stdout, stderr) = run(&["status", "--admin", a.addr()]);
    assert_eq!(code, 0, "{stderr}");
    let line = format!(
        "{}: peer sessions: 2 opened, 0 served, 0 refused, 1 broken; \
         1918 call(s) in sessions, 3 on streams of their own",
        a.addr()
    );
    assert!(stdout.lines().any(|l| l == line), "{stdout}");
}

#[test]
fn status_shows_a_model_reset_prominently() {
    let mut body = status(1, 1);
    body["training"]["global_step"] = json!(0);
    body["training"]["resets"] = json!(1);
    body["training"]["resets_failed"] = json!(1);
    body["training"]["last_reset"] = json!({
        "holder": "/job:ps/replica:0/task:0", "counter": "global_step",
        "from": 99, "to": 0, "unix_time": 1790078584.9, "action": "failed"
    });
    let a = FakeAdmin::answering("GET", "/v1/status", body);
    let (code, stdout, stderr) = a.run(&["status"]);
    assert_eq!(code, 0, "{stderr}");
    let expected = format!(
        "{}: MODEL RESET: global_step on ps/0 went back from 99 to 0 at 12:03:04 UTC \
         (job failed by tlcd)",
        a.addr()
    );
    assert!(stdout.lines().any(|l| l == expected), "{stdout}");
}

#[test]
fn status_json_is_the_results_envelope() {
    let body = status(1, 1);
    let a = FakeAdmin::answering("GET", "/v1/status", body.clone());
    let (code, stdout, stderr) = a.run(&["-o", "json", "status"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        parse_json(&stdout),
        json!({"results": [{"target": a.addr(), "ok": true, "response": body}]})
    );
}

fn config_body() -> Value {
    json!({
        "config": {
            "drain_seconds": 30,
            "routes": [{"listen": "127.0.0.1:17001", "upstream": "ps:2222"}],
            "policy": {
                "min_bytes": 65536,
                "overrides": [],
                "push": {"codec": "3lc", "sparsity": 1.75},
                "pull": {"codec": "3lc", "sparsity": 1.0}
            }
        },
        "sources": {
            "drain_seconds": "default",
            "policy.min_bytes": "file /etc/tlc/tlcd.toml",
            "policy.push.sparsity": "env TLC_POLICY__PUSH__SPARSITY",
            "policy.pull.codec": "flag --pull-codec",
            "policy.overrides": "api"
        }
    })
}

#[test]
fn config_get_lists_every_leaf_with_its_source() {
    let a = FakeAdmin::answering("GET", "/v1/config", config_body());
    let (code, stdout, stderr) = a.run(&["config", "get"]);
    assert_eq!(code, 0, "{stderr}");
    let rows = cells(&stdout);
    assert_eq!(rows[0], ["KEY", "VALUE", "SOURCE"]);
    assert!(
        rows.contains(&vec!["drain_seconds", "30", "default"]),
        "{stdout}"
    );
    assert!(
        rows.contains(&vec!["policy.overrides", "[]", "api"]),
        "{stdout}"
    );
    assert!(
        rows.contains(&vec!["policy.pull.codec", "3lc", "flag --pull-codec"]),
        "{stdout}"
    );
    assert!(
        rows.contains(&vec![
            "routes",
            r#"[{"listen":"127.0.0.1:17001","upstream":"ps:2222"}]"#,
            "-"
        ]),
        "{stdout}"
    );
    assert_eq!(rows.len(), 1 + 8, "{stdout}");
}

#[test]
fn config_get_key_filters_to_its_subtree() {
    let a = FakeAdmin::answering("GET", "/v1/config", config_body());
    let (code, stdout, stderr) = a.run(&["config", "get", "policy.push"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        cells(&stdout),
        [
            vec!["KEY", "VALUE", "SOURCE"],
            vec!["policy.push.codec", "3lc", "-"],
            vec![
                "policy.push.sparsity",
                "1.75",
                "env TLC_POLICY__PUSH__SPARSITY"
            ],
        ]
    );

    let (code, stdout, _) = a.run(&["config", "get", "policy.min_bytes", "-o", "json"]);
    assert_eq!(code, 0);
    assert_eq!(
        parse_json(&stdout)["results"][0]["response"],
        json!({"config": {"policy": {"min_bytes": 65536}},
               "sources": {"policy.min_bytes": "file /etc/tlc/tlcd.toml"}})
    );

    // A prefix of a key name is not a key.
    let (code, stdout, stderr) = a.run(&["config", "get", "policy.pus"]);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert!(stderr.contains("no key policy.pus"), "{stderr}");
}

#[test]
fn tensors_merge_sort_and_limit_across_targets() {
    let long = "gradients/some_very_long_scope/another_scope/dense_layer_7/MatMul_grad/MatMul_1";
    let a = FakeAdmin::answering(
        "GET",
        "/v1/tensors",
        json!({"tensors": [tensor("a/low", 1000, 100, 10.0), tensor(long, 251658240, 2893212, 86.98)]}),
    );
    let b = FakeAdmin::answering(
        "GET",
        "/v1/tensors",
        json!({"tensors": [tensor("b/mid", 5000, 100, 50.0)]}),
    );
    let (code, stdout, stderr) = run(&[
        "tensors",
        "--sort",
        "ratio",
        "--limit",
        "2",
        "--admin",
        a.addr(),
        "--admin",
        b.addr(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(a.only_request().path, "/v1/tensors?sort=ratio&limit=2");
    assert_eq!(b.only_request().path, "/v1/tensors?sort=ratio&limit=2");
    let rows = cells(&stdout);
    assert_eq!(
        rows[0],
        [
            "TARGET",
            "DIRECTION",
            "SIDE",
            "TENSOR",
            "CLASS",
            "TREATMENT",
            "PEER",
            "CODEC",
            "LINK",
            "REGIME",
            "AGREE",
            "S",
            "ELEMENTS",
            "FRAMES",
            "RAW",
            "WIRE",
            "RATIO",
            "LAST M",
            "ERR NORM",
            "PEAK",
            "REPLICA",
            "WHY"
        ]
    );
    assert_eq!(rows.len(), 3, "limit 2 over both targets: {stdout}");
    assert_eq!(rows[1][0], a.addr());
    assert!(
        rows[1][3].contains('…') && rows[1][3].ends_with("MatMul_grad/MatMul_1"),
        "{stdout}"
    );
    assert!(rows[1][3].chars().count() <= 48);
    assert_eq!(
        rows[1][4..],
        [
            "dense_gradient",
            "error_feedback",
            "/job:worker/replica:0/task:1",
            "3lc",
            "compress",
            "calm",
            "0.12",
            "1.00",
            "524288",
            "120",
            "240.0 MiB",
            "2.8 MiB",
            "87.0x",
            "0.0123",
            "0.731",
            "1.25",
            "-",
            "feeds ApplyMomentum apply"
        ]
    );
    assert_eq!((rows[2][0], rows[2][3]), (b.addr(), "b/mid"));
}

#[test]
fn tensors_of_one_target_have_no_target_column() {
    // A row without an agreement (tlcd before it, or nothing said yet).
    let mut row = tensor("t", 2048, 1024, 2.0);
    if let Some(row) = row.as_object_mut() {
        row.remove("agreement");
    }
    let a = FakeAdmin::answering("GET", "/v1/tensors", json!({"tensors": [row]}));
    let (code, stdout, stderr) = a.run(&["tensors"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(a.only_request().path, "/v1/tensors");
    let rows = cells(&stdout);
    assert_eq!(rows[0][0], "DIRECTION");
    assert_eq!(rows[1][..3], ["push", "holder", "t"]);
    assert!(
        rows[1].contains(&"2.0 KiB") && rows[1].contains(&"1.0 KiB"),
        "{stdout}"
    );
    assert_eq!(rows[0][8..10], ["REGIME", "AGREE"]);
    assert_eq!(rows[1][8..10], ["calm", "-"], "{stdout}");
}

#[test]
fn log_level_reads_the_filter() {
    let a = FakeAdmin::answering("GET", "/v1/log-level", json!({"filter": "info"}));
    let (code, stdout, stderr) = a.run(&["log-level"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        cells(&stdout),
        [vec!["TARGET", "FILTER"], vec![a.addr(), "info"]]
    );
}

#[test]
fn version_names_tlcctl_and_every_sidecar() {
    let same = FakeAdmin::answering("GET", "/v1/status", status(1, 1));
    let mut older = status(1, 1);
    older["version"] = json!("0.0.9");
    let other = FakeAdmin::answering("GET", "/v1/status", older);
    let (code, stdout, stderr) = run(&["version", "--admin", same.addr(), "--admin", other.addr()]);
    assert_eq!(code, 0, "{stderr}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        stdout.starts_with(&format!("tlcctl {version}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{}: tlcd {version}\n", same.addr())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{}: tlcd 0.0.9 (not this tlcctl's version)",
            other.addr()
        )),
        "{stdout}"
    );
    let (code, stdout, _) = run(&["version", "--client", "--admin", "127.0.0.1:1"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, format!("tlcctl {version}\n"));
}

#[test]
fn status_says_which_file_changes_have_no_effect() {
    let mut answer = status(1, 1);
    answer["reloads"]["overridden"] = json!(["policy.push.codec (env TLC_POLICY__PUSH__CODEC)"]);
    answer["reloads"]["pending_restart"] = json!(["drain_seconds"]);
    let server = FakeAdmin::answering("GET", "/v1/status", answer);
    let (code, stdout, stderr) = run(&["status", "--admin", server.addr()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "{}: warning: config file changes without effect, a higher layer sets them: policy.push.codec (env TLC_POLICY__PUSH__CODEC)",
            server.addr()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("config file changes waiting for a restart: drain_seconds"),
        "{stdout}"
    );
}
