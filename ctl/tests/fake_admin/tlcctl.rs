//! Running `tlcctl` and reading what it printed.

use serde_json::Value;

/// What a run gave: exit code, stdout, stderr.
pub type Run = (i32, String, String);

/// Runs tlcctl with `TLC_ADMIN` unset.
pub fn run(args: &[&str]) -> Run {
    run_with(args, None)
}

/// Runs tlcctl with `TLC_ADMIN` set to `env`, or unset.
pub fn run_with(args: &[&str], env: Option<&str>) -> Run {
    match env {
        Some(value) => run_env(args, &[("TLC_ADMIN", value)]),
        None => run_env(args, &[]),
    }
}

/// Runs tlcctl with `vars` set, and without the admin variables and token
/// directories of the environment the tests run in (`TLC_ADMIN`,
/// `TLC_ADMIN_TOKEN_FILE`, `XDG_RUNTIME_DIR`; `TMPDIR` an empty directory)
/// unless `vars` sets them: a token file a real tlcd left must not decide
/// what a test sees.
pub fn run_env(args: &[&str], vars: &[(&str, &str)]) -> Run {
    let empty = tempfile::tempdir().expect("temp dir");
    let mut cmd = crate::common::tlcctl();
    cmd.env_remove("TLC_ADMIN")
        .env_remove("TLC_ADMIN_TOKEN_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", empty.path());
    for (name, value) in vars {
        cmd.env(name, value);
    }
    let output = cmd.args(args).output().expect("run tlcctl");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).expect("utf-8"),
        String::from_utf8(output.stderr).expect("utf-8"),
    )
}

/// The cells of a table line: the parts two or more spaces apart.
pub fn words(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect()
}

/// The cells of every line of a table.
pub fn cells(table: &str) -> Vec<Vec<&str>> {
    table.lines().map(words).collect()
}

/// Output that must be one JSON document.
pub fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}
