//! Several targets, unreachable or misbehaving ones, addresses and the
//! environment: every target is tried, each failure names its target, and
//! nothing a server sends makes tlcctl panic.

mod common;
mod fake_admin;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use fake_admin::tlcctl::{parse_json, run, run_with};
use fake_admin::{dead_addr, status, FakeAdmin, Reply};
use serde_json::json;

#[test]
fn a_change_with_one_target_down_reports_each_and_exits_1() {
    let up = FakeAdmin::policy();
    let down = dead_addr();
    let (code, stdout, stderr) = run(&[
        "set",
        "sparsity",
        "1.75",
        "--admin",
        &down,
        "--admin",
        up.addr(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        stdout,
        format!("{}: ok (changed policy.push.sparsity)\n", up.addr())
    );
    assert_eq!(
        stderr,
        format!("{down}: error: cannot reach tlcd admin at {down}: connection refused\n")
    );
    // The live one was changed even though the first target failed.
    assert_eq!(up.requests().len(), 1);
}

#[test]
fn a_read_with_one_target_down_shows_the_others() {
    let up = FakeAdmin::answering("GET", "/v1/status", status(1, 1));
    let down = dead_addr();
    let (code, stdout, stderr) = run(&["status", "--admin", up.addr(), "--admin", &down]);
    assert_eq!(code, 1);
    // The header, the row, and its training line: nothing of the other.
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(up.addr())),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "cannot reach tlcd admin at {down}: connection refused"
        )),
        "{stderr}"
    );

    let (code, stdout, _) = run(&[
        "status",
        "-o",
        "json",
        "--admin",
        up.addr(),
        "--admin",
        &down,
    ]);
    assert_eq!(code, 1);
    let parsed = parse_json(&stdout);
    assert_eq!(parsed["results"][0]["ok"], true);
    assert_eq!(
        parsed["results"][1],
        json!({"target": down, "ok": false,
               "error": format!("cannot reach tlcd admin at {down}: connection refused")})
    );
}

#[test]
fn non_json_answers_are_errors_naming_the_target() {
    let server = FakeAdmin::start(|request, _| match request.path.as_str() {
        "/v1/status" => Reply::raw(200, "<html>not an admin api</html>"),
        "/v1/tensors" => Reply::raw(502, "Bad Gateway"),
        "/v1/config" => Reply::raw(200, ""),
        _ => Reply::json(200, json!({"tensors": "not a list"})),
    });
    for command in ["status", "tensors", "config"] {
        let args: Vec<&str> = match command {
            "config" => vec!["config", "get"],
            other => vec![other],
        };
        let (code, stdout, stderr) = server.run(&args);
        assert_eq!(code, 1, "{command}: {stderr}");
        assert_eq!(stdout, "", "{command}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "{}: error: tlcd admin at {}",
                server.addr(),
                server.addr()
            )),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (_, _, stderr) = server.run(&["status"]);
    assert!(
        stderr.contains("not JSON") && stderr.contains("<html>"),
        "{stderr}"
    );
    let (_, _, stderr) = server.run(&["tensors"]);
    assert!(
        stderr.contains("502") && stderr.contains("Bad Gateway"),
        "{stderr}"
    );
}

#[test]
fn json_of_the_wrong_shape_blanks_cells_without_failing() {
    let server = FakeAdmin::start(|request, _| match request.path.as_str() {
        "/v1/status" => Reply::json(200, json!({"ready": "maybe", "totals": 7})),
        _ => Reply::json(
            200,
            json!({"tensors": [{"tensor": 5}, "row"], "filter": ["x"]}),
        ),
    });
    for args in [
        vec!["status"],
        vec!["tensors"],
        vec!["log-level"],
        vec!["config", "get"],
    ] {
        let (code, _, stderr) = server.run(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
}

#[test]
fn a_silent_target_times_out() {
    // Accepts connections (the kernel's backlog) but never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let started = Instant::now();
    let (code, _, stderr) = run(&["status", "--timeout", "0.3", "--admin", &addr]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!("{addr}: error: tlcd admin at {addr} did not answer within 0.3s\n")
    );
    drop(listener);
}

#[test]
fn targets_from_the_environment_and_url_forms() {
    let a = FakeAdmin::answering("GET", "/v1/log-level", json!({"filter": "info"}));
    let b = FakeAdmin::answering("GET", "/v1/log-level", json!({"filter": "debug"}));
    let env = format!("{}, http://{}/", a.addr(), b.addr());
    let (code, stdout, stderr) = run_with(&["log-level"], Some(&env));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("{}  info", a.addr())), "{stdout}");
    assert!(stdout.contains(&format!("{}  debug", b.addr())), "{stdout}");

    // --admin replaces the environment; a target named twice is asked once.
    let (code, _, stderr) = run_with(
        &[
            "log-level",
            "--admin",
            a.addr(),
            "--admin",
            &format!("http://{}", a.addr()),
        ],
        Some("127.0.0.1:1"),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(a.requests().len(), 2);
    assert_eq!(b.requests().len(), 1);
}

#[test]
fn bad_addresses_are_usage_errors() {
    for bad in ["https://127.0.0.1:17000", "127.0.0.1:port", "host:1/v1", ""] {
        let (code, _, stderr) = run(&["status", "--admin", bad]);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
    }
    let (code, _, _) = run(&["status", "--timeout", "0"]);
    assert_eq!(code, 2);
}

#[test]
fn the_default_target_is_the_local_admin_port() {
    // Nothing is assumed to listen on 17000 here; only the address matters.
    let (code, _, stderr) = run(&["status", "--timeout", "1"]);
    assert_eq!(code == 0, stderr.is_empty(), "{stderr}");
    if code != 0 {
        assert!(stderr.starts_with("127.0.0.1:17000: error: "), "{stderr}");
    }
}

#[test]
fn completions_list_the_admin_commands() {
    let output = common::tlcctl()
        .args(["completions", "bash"])
        .output()
        .expect("run");
    assert!(output.status.success());
    let script = String::from_utf8(output.stdout).expect("utf-8");
    for word in [
        "status",
        "config",
        "reload",
        "tensors",
        "top",
        "log-level",
        "threshold",
        "--admin",
        "--output",
    ] {
        assert!(script.contains(word), "{word} missing from completions");
    }
}
