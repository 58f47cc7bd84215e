//! `set`, `config set`, `reload` and `log-level FILTER`: the exact request
//! each sends, the per-target result lines, and the daemon's refusals.

mod common;
mod fake_admin;

use fake_admin::tlcctl::parse_json;
use fake_admin::{FakeAdmin, Reply};
use serde_json::{json, Value};

/// Runs `set ARGS` against a fresh policy server and returns the JSON body
/// it received.
fn policy_body(args: &[&str]) -> Value {
    let server = FakeAdmin::policy();
    let mut all = vec!["set"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = server.run(&all);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    assert_eq!(
        stdout,
        format!("{}: ok (changed policy.push.sparsity)\n", server.addr())
    );
    server.only_request_to("POST", "/v1/policy").json()
}

#[test]
fn set_sends_exactly_what_was_asked() {
    assert_eq!(
        policy_body(&[
            "sparsity",
            "1.75",
            "--tensor",
            "*dense*",
            "--direction",
            "push"
        ]),
        json!({"sparsity": 1.75, "tensor": "*dense*", "direction": "push"})
    );
    assert_eq!(policy_body(&["sparsity", "1.5"]), json!({"sparsity": 1.5}));
    assert_eq!(
        policy_body(&["codec", "3lc", "--sparsity", "1.25", "--direction", "both"]),
        json!({"codec": "3lc", "sparsity": 1.25, "direction": "both"})
    );
    assert_eq!(
        policy_body(&["codec", "fp16", "--tensor", "*emb*"]),
        json!({"codec": "fp16", "tensor": "*emb*"})
    );
    assert_eq!(
        policy_body(&["threshold", "64KiB"]),
        json!({"min_bytes": 65536})
    );
    assert_eq!(
        policy_body(&["threshold", "1MiB"]),
        json!({"min_bytes": 1048576})
    );
    assert_eq!(
        policy_body(&["threshold", "4096"]),
        json!({"min_bytes": 4096})
    );
    assert_eq!(
        policy_body(&["skip", "--tensor", "*embedding*", "--direction", "pull"]),
        json!({"skip": true, "tensor": "*embedding*", "direction": "pull"})
    );
}

#[test]
fn an_integer_stays_an_integer() {
    let server = FakeAdmin::policy();
    let (code, _, stderr) = server.run(&["set", "codec", "topk", "--k", "5"]);
    assert_eq!(code, 0, "{stderr}");
    // `5`, not `5.0`: a daemon reading k as an integer must accept it.
    assert_eq!(server.only_request().body, r#"{"codec":"topk","k":5}"#);
}

#[test]
fn syntax_errors_are_usage_errors_and_send_nothing() {
    let server = FakeAdmin::policy();
    for args in [
        vec!["set", "sparsity", "abc"],
        vec!["set", "sparsity", "NaN"],
        vec!["set", "codec", "topk", "--k", "five"],
        vec!["set", "threshold", "64XB"],
        vec!["set", "threshold", "1.5B"],
        vec!["set", "skip"],
        vec!["set", "sparsity", "1.5", "--direction", "sideways"],
        vec!["config", "set", "no-equals-sign"],
        vec!["config", "set"],
    ] {
        let (code, _, stderr) = server.run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
    assert!(server.requests().is_empty());
}

#[test]
fn range_checks_are_the_daemons() {
    let server = FakeAdmin::refusing(
        "POST",
        "/v1/policy",
        "sparsity 2.5 is out of range [1.0, 2.0)",
    );
    let (code, stdout, stderr) = server.run(&["set", "sparsity", "2.5"]);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        format!(
            "{}: error: sparsity 2.5 is out of range [1.0, 2.0)\n",
            server.addr()
        )
    );
    assert_eq!(server.only_request().json(), json!({"sparsity": 2.5}));

    // Negative numbers reach the daemon too, rather than being taken for flags.
    let (code, _, stderr) = server.run(&["set", "sparsity", "-1"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(server.requests()[1].json(), json!({"sparsity": -1}));
}

#[test]
fn config_set_patches_by_key_and_shows_the_result() {
    let server = FakeAdmin::answering(
        "PATCH",
        "/v1/config",
        json!({
            "config": {"policy": {"min_bytes": 65536, "push": {"codec": "3lc", "sparsity": 1.75},
                                  "overrides": [{"tensor": "*emb*", "skip": true}]}},
            "sources": {"policy.push.sparsity": "api", "policy.min_bytes": "default",
                        "policy.overrides": "api"}
        }),
    );
    let (code, stdout, stderr) = server.run(&[
        "config",
        "set",
        "policy.push.sparsity=1.75",
        "policy.min_bytes=null",
        "policy.push.codec=3lc",
        r#"policy.overrides=[{"tensor":"*emb*","skip":true}]"#,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        server.only_request_to("PATCH", "/v1/config").json(),
        json!({"policy.push.sparsity": 1.75, "policy.min_bytes": null, "policy.push.codec": "3lc",
               "policy.overrides": [{"tensor": "*emb*", "skip": true}]})
    );
    assert_eq!(
        stdout,
        format!(
            "{}: ok (policy.push.sparsity = 1.75 from api, policy.min_bytes = 65536 from default, \
             policy.push.codec = 3lc from -, policy.overrides = [{{\"skip\":true,\"tensor\":\"*emb*\"}}] from api)\n",
            server.addr()
        )
    );
}

#[test]
fn config_set_refusal_is_printed_verbatim() {
    let message = "policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)";
    let server = FakeAdmin::refusing("PATCH", "/v1/config", message);
    let (code, _, stderr) = server.run(&["config", "set", "policy.push.sparsity=2.5"]);
    assert_eq!(code, 1);
    assert_eq!(stderr, format!("{}: error: {message}\n", server.addr()));
}

#[test]
fn reload_posts_without_a_body() {
    let server = FakeAdmin::answering("POST", "/v1/reload", json!({"config": {}, "sources": {}}));
    let (code, stdout, stderr) = server.run(&["reload"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, format!("{}: ok (reloaded)\n", server.addr()));
    assert_eq!(server.only_request_to("POST", "/v1/reload").body, "");
}

#[test]
fn log_level_puts_the_filter() {
    let server = FakeAdmin::start(|request, _| {
        let filter = serde_json::from_str::<Value>(&request.body)
            .ok()
            .and_then(|v| v.get("filter").cloned())
            .unwrap_or(Value::Null);
        Reply::json(200, json!({ "filter": filter }))
    });
    let filter = "info,tlc_sidecar::sidecar=debug";
    let (code, stdout, stderr) = server.run(&["log-level", filter]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, format!("{}: ok (filter {filter})\n", server.addr()));
    assert_eq!(
        server.only_request_to("PUT", "/v1/log-level").json(),
        json!({ "filter": filter })
    );
}

#[test]
fn change_in_json_has_the_same_envelope() {
    let server = FakeAdmin::policy();
    let (code, stdout, stderr) = server.run(&["set", "sparsity", "1.75", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let parsed = parse_json(&stdout);
    assert_eq!(parsed["results"][0]["target"], server.addr());
    assert_eq!(parsed["results"][0]["ok"], true);
    assert_eq!(
        parsed["results"][0]["response"]["changed"],
        json!(["policy.push.sparsity"])
    );
}
