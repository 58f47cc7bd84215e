//! The admin token: tlcctl sends the one in `--token-file` (or
//! `TLC_ADMIN_TOKEN_FILE`), or for a loopback target the one tlcd wrote
//! for itself; a refused or missing token is one line that names the file
//! and says how to pass the right one.

mod common;
mod fake_admin;

use std::path::Path;
use std::sync::{Arc, Mutex};

use fake_admin::tlcctl::run_env;
use fake_admin::{status, FakeAdmin, Reply};
use serde_json::json;

const RIGHT: &str = "right-token-0123456789abcdef";
const WRONG: &str = "stale-token-0123456789abcdef";

/// A fake admin API that answers `/v1/status` and `/v1/reload` only with
/// the token `token` holds.
fn guarded(token: &Arc<Mutex<String>>) -> FakeAdmin {
    FakeAdmin::with_token(Arc::clone(token), |request, _| match request.path_only() {
        "/v1/status" => Reply::json(200, status(1, 1)),
        "/v1/reload" => Reply::json(200, json!({"config": {}, "sources": {}})),
        _ => Reply::json(404, json!({"error": "no such endpoint"})),
    })
}

fn token(text: &str) -> Arc<Mutex<String>> {
    Arc::new(Mutex::new(text.to_string()))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write token file");
}

#[test]
fn the_token_file_is_sent_and_a_refused_one_is_named() {
    let server = guarded(&token(RIGHT));
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("token");
    write(&file, &format!("{RIGHT}\n"));
    let path = file.to_string_lossy().to_string();

    let (code, stdout, stderr) = run_env(
        &["status", "--token-file", &path, "--admin", server.addr()],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(server.addr()) || stdout.contains("yes"),
        "{stdout}"
    );
    let request = server.only_request();
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {RIGHT}").as_str())
    );

    write(&file, WRONG);
    let (code, stdout, stderr) = run_env(
        &["status", "--admin", server.addr()],
        &[("TLC_ADMIN_TOKEN_FILE", &path)],
    );
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    let addr = server.addr();
    assert_eq!(
        stderr,
        format!(
            "{addr}: error: tlcd admin at {addr} refused the token in {path} (wrong, or rotated \
             since): pass the file tlcd reads (admin.token_file) with --token-file PATH or \
             TLC_ADMIN_TOKEN_FILE\n"
        )
    );
}

#[test]
fn a_missing_token_file_is_an_error_before_any_request() {
    let server = guarded(&token(RIGHT));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent").to_string_lossy().to_string();
    let (code, _, stderr) = run_env(
        &["reload", "--token-file", &path, "--admin", server.addr()],
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!(
            "{}: error: cannot read the admin token file {path}: ",
            server.addr()
        )) && stderr
            .trim_end()
            .ends_with("(--token-file / TLC_ADMIN_TOKEN_FILE)"),
        "{stderr}"
    );
    assert!(server.requests().is_empty());
}

#[test]
fn a_rotated_file_is_read_again() {
    let current = token(RIGHT);
    let server = guarded(&current);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("token");
    write(&file, RIGHT);
    let path = file.to_string_lossy().to_string();
    let reload = ["reload", "--token-file", &path, "--admin", server.addr()];
    assert_eq!(run_env(&reload, &[]).0, 0);

    // tlcd rotated its token; tlcctl still has the old file: refused.
    *current.lock().expect("lock") = "rotated-token-0123456789abcdef".into();
    let (code, _, stderr) = run_env(&reload, &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("refused the token in"), "{stderr}");

    // The Secret is rotated on this side too: accepted, nothing else changed.
    write(&file, "rotated-token-0123456789abcdef\n");
    let (code, stdout, stderr) = run_env(&reload, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, format!("{}: ok (reloaded)\n", server.addr()));
    // A reload has no body but is still declared JSON, as tlcd requires.
    let requests = server.requests();
    let last = requests.last().expect("a request");
    assert_eq!(last.content_type.as_deref(), Some("application/json"));
    assert_eq!(last.body, "");
}

#[test]
fn a_loopback_target_gets_the_token_tlcd_wrote_for_itself() {
    let server = guarded(&token(RIGHT));
    let port = server.addr().rsplit_once(':').expect("port").1.to_string();
    let runtime = tempfile::tempdir().expect("temp dir");
    let xdg = runtime.path().to_string_lossy().to_string();
    let expected = runtime
        .path()
        .join("tlcd")
        .join(format!("admin-{port}.token"));

    // Nothing written yet: no token sent, and the error says where tlcctl looked.
    let (code, _, stderr) = run_env(
        &["status", "--admin", server.addr()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!(
            "needs a token and none was found (no {}",
            expected.display()
        )) && stderr.contains("--token-file PATH"),
        "{stderr}"
    );
    assert_eq!(server.only_request().authorization, None);

    std::fs::create_dir(runtime.path().join("tlcd")).expect("mkdir");
    write(&expected, &format!("{RIGHT}\n"));
    let (code, _, stderr) = run_env(
        &["status", "--admin", server.addr()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    );
    assert_eq!(code, 0, "{stderr}");

    // Another port's file is not this target's.
    let other = guarded(&token(RIGHT));
    let (code, _, stderr) = run_env(
        &["status", "--admin", other.addr()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("none was found"), "{stderr}");
}
