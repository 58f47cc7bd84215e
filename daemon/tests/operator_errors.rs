//! What an operator's mistake gets from `tlcd` before it serves anything:
//! one line that names the mistake and what is allowed, as JSON when the
//! logs are JSON, and `--check-config` to ask before starting.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs tlcd with `args` and `env` (and no other `TLC_` variable), its
/// admin API and metrics endpoint off.
fn tlcd(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--admin-listen", "off", "--metrics-listen", "off"]);
    tlcd_as_given(&all, env)
}

/// Runs tlcd with `args` and `env` (and no other `TLC_` variable).
fn tlcd_as_given(args: &[&str], env: &[(&str, &str)]) -> Output {
    let runtime = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tlcd"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TLC_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    let mut child = command
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every case here ends at once; one that serves instead is a failure,
    // not a hung test.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tlcd {args:?} did not exit: it is serving");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn toml_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

const ROUTE: &str = "127.0.0.1:1=127.0.0.1:2,inbound";

#[test]
fn a_word_that_is_no_level_is_refused() {
    for level in ["verbose", "warning"] {
        let out = tlcd(
            &["--log-level", level, "--check-config", "--route", ROUTE],
            &[],
        );
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.starts_with("tlcd: error: log.level = "), "{err}");
        assert!(
            err.contains("off, error, warn, info, debug, trace"),
            "{err}"
        );
    }
}

#[test]
fn a_misspelt_environment_table_is_refused() {
    let out = tlcd(&["--route", ROUTE], &[("TLC_POLCY__MIN_BYTES", "8192")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("TLC_POLCY__MIN_BYTES"), "{err}");
    assert!(err.contains("did you mean 'policy'"), "{err}");
}

#[test]
fn a_bad_word_lists_the_allowed_ones() {
    let file = toml_file(
        "[[routes]]\nlisten = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\nrole = \"sideways\"\n",
    );
    let path = file.path().to_str().unwrap();
    let out = tlcd(&["--config", path], &[]);
    assert_eq!(
        stderr(&out).trim(),
        "tlcd: error: routes[0].role = sideways: expected `outbound` or `inbound`"
    );
}

#[test]
fn the_fatal_line_is_json_under_json_logs() {
    let out = tlcd(
        &[
            "--log-format",
            "json",
            "--log-level",
            "loud",
            "--route",
            ROUTE,
        ],
        &[],
    );
    assert!(!out.status.success());
    let line = stderr(&out);
    let parsed: serde_json::Value = serde_json::from_str(line.trim()).expect(&line);
    assert_eq!(parsed["level"], "ERROR");
    let error = parsed["fields"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("log.level = loud"), "{line}");
}

#[test]
fn a_cause_is_said_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let route = format!("{}=127.0.0.1:2,inbound", taken.local_addr().unwrap());
    let out = tlcd(&["--route", &route], &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("tlcd: error: cannot listen on"), "{err}");
    let os = last.matches("os error").count();
    assert_eq!(os, 1, "{last}");
}

#[test]
fn check_config_says_whether_tlcd_would_start() {
    let file = toml_file(
        "[[routes]]\nlisten = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\nrole = \"inbound\"\n\
         [policy]\nmin_bytes = 8192\n",
    );
    let path = file.path().to_str().unwrap();
    let out = tlcd(
        &["--check-config", path],
        &[("TLC_POLICY__PUSH__SPARSITY", "1.5")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("min_bytes = 8192"), "{shown}");
    assert!(
        shown.contains("policy.push.sparsity: env TLC_POLICY__PUSH__SPARSITY"),
        "{shown}"
    );
    assert!(shown.contains("configuration OK"), "{shown}");
    // Without a file, the flags alone; a route's upstream may be a name.
    let out = tlcd(
        &[
            "--check-config",
            "--route",
            "127.0.0.1:1=ps-0.training.svc:2222,outbound",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("upstream = \"ps-0.training.svc:2222\""),
        "{shown}"
    );
    let out = tlcd(
        &[
            "--check-config",
            "--route",
            "127.0.0.1:1=ps-0:port,outbound",
        ],
        &[],
    );
    assert!(
        stderr(&out).contains("expected IP:PORT, [IPv6]:PORT or NAME:PORT"),
        "{}",
        stderr(&out)
    );
    // It listens on nothing: port 1 would need root, and is not asked for.
    let out = tlcd(
        &["--check-config", path],
        &[("TLC_POLICY__PUSH__SPARSITY", "3")],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("policy.push.sparsity = 3"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tlcctls_variables_are_left_alone() {
    // README's `export TLC_ADMIN=...` is for tlcctl, in the same shell.
    let out = tlcd(
        &["--check-config", "--route", ROUTE],
        &[
            (
                "TLC_ADMIN",
                "127.0.0.1:15100,127.0.0.1:15101,127.0.0.1:15102",
            ),
            ("TLC_IMAGE", "ghcr.io/tlc-project/tlcd:0.1.0"),
            ("TLC_PYTHON", "/usr/bin/python3"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The [admin] table's own keys are still tlcd's.
    let out = tlcd_as_given(
        &[
            "--check-config",
            "--route",
            ROUTE,
            "--metrics-listen",
            "off",
        ],
        &[
            ("TLC_ADMIN", "127.0.0.1:15100"),
            ("TLC_ADMIN__LISTEN", "127.0.0.1:17777"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("listen = \"127.0.0.1:17777\""), "{shown}");
}

#[test]
fn an_unknown_variable_is_refused_with_the_name_meant() {
    for (name, value, meant) in [
        ("TLC_SPARSITY", "1.5", "TLC_POLICY__PUSH__SPARSITY"),
        ("TLC_CODEC", "int8", "TLC_POLICY__PUSH__CODEC"),
        ("TLC_THREAD", "4", "TLC_THREADS"),
        ("TLC_CONFG", "/x", "TLC_CONFIG"),
    ] {
        let out = tlcd(&["--check-config", "--route", ROUTE], &[(name, value)]);
        assert!(!out.status.success(), "{name} passed");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("environment variable {name}:")),
            "{err}"
        );
        assert!(err.contains(meant), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
    }
}

#[test]
fn values_of_the_wrong_type_are_refused() {
    for (text, said) in [
        (
            "[contexts]\npull_cache = 8.5\n",
            "contexts.pull_cache = 8.5: a whole number",
        ),
        (
            "[policy]\nentropy = \"yes\"\n",
            "policy.entropy = \"yes\": true or false",
        ),
        (
            "[policy]\nmin_bytes = \"2048\"\n",
            "policy.min_bytes = \"2048\": a whole number",
        ),
    ] {
        let file = toml_file(text);
        let path = file.path().to_str().unwrap();
        let out = tlcd(&["--check-config", path, "--route", ROUTE], &[]);
        assert!(!out.status.success(), "{text} passed");
        assert!(stderr(&out).contains(said), "{}", stderr(&out));
    }
    let out = tlcd(
        &["--check-config", "--route", ROUTE],
        &[("TLC_POLICY__MIN_BYTES", "2048.5")],
    );
    assert!(
        stderr(&out).contains("policy.min_bytes (env TLC_POLICY__MIN_BYTES) = 2048.5"),
        "{}",
        stderr(&out)
    );
    let out = tlcd(
        &["--check-config", "--route", ROUTE],
        &[("TLC_POLICY__MIN_BYTES", "2048")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_destructive_setting_needs_its_override() {
    let file = toml_file("[policy.sparse]\ncodec = \"3lc\"\n");
    let path = file.path().to_str().unwrap();
    let out = tlcd(&["--check-config", path, "--route", ROUTE], &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("policy.sparse.codec = 3lc"), "{err}");
    assert!(
        err.contains("allow_destructive = [\"policy.sparse.codec\"]"),
        "{err}"
    );
    let file = toml_file(
        "allow_destructive = [\"policy.sparse.codec\"]\n[policy.sparse]\ncodec = \"3lc\"\n",
    );
    let path = file.path().to_str().unwrap();
    let out = tlcd(&["--check-config", path, "--route", ROUTE], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn check_config_fails_where_start_up_would() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("token");
    let missing = missing.to_str().unwrap();
    let endpoints = |admin: &'static str, metrics: &'static str| {
        vec![
            "--route",
            ROUTE,
            "--admin-listen",
            admin,
            "--metrics-listen",
            metrics,
        ]
    };
    let mut args = endpoints("127.0.0.1:0", "off");
    args.extend(["--admin-token-file", missing]);
    let mut checking = args.clone();
    checking.push("--check-config");
    let checked = tlcd_as_given(&checking, &[]);
    assert!(!checked.status.success(), "a missing token file passed");
    let said = stderr(&checked);
    assert!(said.contains("admin.token_file = "), "{said}");
    assert!(!String::from_utf8_lossy(&checked.stdout).contains("configuration OK"));
    // Start-up says the same.
    let started = tlcd_as_given(&args, &[]);
    assert!(!started.status.success());
    assert_eq!(stderr(&started), said);

    let mut args = endpoints("127.0.0.1:17123", "127.0.0.1:17123");
    args.push("--check-config");
    let out = tlcd_as_given(&args, &[]);
    assert!(
        !out.status.success(),
        "admin and metrics on one address passed"
    );
    assert!(
        stderr(&out).contains("metrics.listen = 127.0.0.1:17123: must differ from admin.listen"),
        "{}",
        stderr(&out)
    );
}
