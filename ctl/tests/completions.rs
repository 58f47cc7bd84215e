//! `tlcctl completions`: the script goes to stdout, and a reader that
//! stops early (`tlcctl completions bash | head -1`) ends it quietly.

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn a_reader_closing_early_is_a_quiet_exit_0() {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin!("tlcctl"))
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tlcctl");
    let mut stdout = child.stdout.take().expect("stdout");
    // A few bytes, as `head -c` would, then the pipe closes: the script is
    // far larger than the pipe's buffer, so tlcctl's write meets the close.
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("read");
    drop(stdout);
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "no message: {stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(first.starts_with(b"_tlcctl()"), "{first:?}");
}

#[test]
fn the_whole_script_reaches_a_reader_that_stays() {
    let output = Command::new(assert_cmd::cargo::cargo_bin!("tlcctl"))
        .args(["completions", "bash"])
        .output()
        .expect("run tlcctl");
    assert!(output.status.success());
    let script = String::from_utf8_lossy(&output.stdout);
    assert!(script.len() > 64 * 1024, "{} bytes", script.len());
    assert!(script.contains("complete -F _tlcctl"), "{script}");
}
