//! Helpers shared by the tlcctl integration tests.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// The image the inject tests give (`TLC_IMAGE`), which the golden files
/// hold: not the sidecar spec's placeholder, which inject refuses.
pub const IMAGE: &str = "registry.example.com/tlc/tlcd:0.1.0";

/// A `tlcctl` command, with `TLC_IMAGE` set for `inject`.
pub fn tlcctl() -> Command {
    let mut command = assert_cmd::cargo::cargo_bin_cmd!("tlcctl");
    command.env("TLC_IMAGE", IMAGE);
    command
}

/// `tlcctl codec ACTION FLAGS... INPUT OUTPUT`, the shape of every encode
/// and decode.
pub fn codec(action: &str, flags: &[&str], input: &Path, output: &Path) -> Command {
    let mut command = tlcctl();
    command
        .args(["codec", action])
        .args(flags)
        .arg(input)
        .arg(output);
    command
}

/// Runs `tlcctl ARGS -` with `stdin`: exit code, stdout, stderr.
pub fn on_stdin(args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let output = tlcctl()
        .args(args)
        .arg("-")
        .write_stdin(stdin)
        .output()
        .expect("run tlcctl");
    outcome(&output)
}

/// What a finished tlcctl run gave: exit code, stdout, stderr, the triple
/// the tests compare.
pub fn outcome(output: &std::process::Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A scratch directory and paths in it.
pub struct Scratch {
    dir: TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes raw little-endian f32 values to `name` and returns its path.
    pub fn f32_file(&self, name: &str, values: &[f32]) -> PathBuf {
        let path = self.path(name);
        write_f32(&path, values);
        path
    }
}

pub fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    fs::write(path, bytes).expect("write f32 file");
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = fs::read(path).expect("read f32 file");
    assert_eq!(bytes.len() % 4, 0, "{} is not whole f32s", path.display());
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Deterministic gradient-like values: centred, heavy-ish tails, ~1e-3.
pub fn gradient(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let sign = if uniform() < 0.5 { -1.0 } else { 1.0 };
            (sign * 1e-3 * -uniform().ln()) as f32
        })
        .collect()
}

/// Runs `tlcctl codec inspect --json` and parses every line.
pub fn inspect_json(path: &Path) -> Vec<Value> {
    let output = tlcctl()
        .args(["codec", "inspect", "--json"])
        .arg(path)
        .output()
        .expect("run tlcctl");
    assert!(
        output.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

/// Runs a command that must fail at run time (exit 1) and returns its one
/// line of stderr, checking the `tlcctl: error: ` prefix.
pub fn fails(cmd: &mut Command) -> String {
    let output = cmd.output().expect("run tlcctl");
    let stderr = String::from_utf8(output.stderr).expect("utf-8");
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("tlcctl: error: "), "{stderr}");
    lines[0].to_string()
}

/// The `--tf-ports` value of the `tlc-init` command in a pod spec.
pub fn tf_ports(spec: &Value) -> String {
    let init = &spec["initContainers"][0];
    assert_eq!(init["name"], "tlc-init");
    init["command"][3].as_str().expect("ports").to_string()
}

/// A pod for `inject`: a `tensorflow` container beside another of the user's.
pub const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
  - name: sidecar-of-the-user
    ports:
    - containerPort: 8080
  - name: tensorflow
    ports:
    - containerPort: 2222
    - containerPort: 2223
";
