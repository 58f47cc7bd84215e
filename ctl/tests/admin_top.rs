//! `tlcctl top`: frames, rates from two polls, plain output off a terminal.

mod common;
mod fake_admin;

use fake_admin::tlcctl::{run, words, Run};
use fake_admin::{dead_addr, status, tensor, FakeAdmin, Reply};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// Each status poll reports 10 MiB more raw and 1 MiB more wire bytes.
fn growing() -> FakeAdmin {
    FakeAdmin::start(|request, n| {
        let n = n as u64;
        match request.path_only() {
            "/v1/status" => Reply::json(200, status(10 * MIB * (n + 1), MIB * (n + 1))),
            "/v1/tensors" => {
                Reply::json(200, json!({"tensors": [tensor("layer/w", 2048, 64, 32.0)]}))
            }
            _ => Reply::json(404, json!({"error": "no such endpoint"})),
        }
    })
}

/// Runs `top OPTIONS` against `admins` for `iterations` refreshes 0.1 s
/// apart.
fn top(iterations: &str, options: &[&str], admins: &[&str]) -> Run {
    let mut args = vec!["top", "--iterations", iterations, "--interval", "0.1"];
    args.extend_from_slice(options);
    for admin in admins {
        args.extend(["--admin", admin]);
    }
    run(&args)
}

/// The cells of the push row of a frame's header.
fn push_row(frame: &str) -> Vec<&str> {
    let line = frame
        .lines()
        .find(|l| l.trim_start().starts_with("push  "))
        .unwrap_or_else(|| panic!("no push row in {frame}"));
    words(line)
}

/// Bytes per second from `57.2 MiB/s`; `None` for `-`.
fn per_second(cell: &str) -> Option<f64> {
    let (number, unit) = cell.split_once(' ')?;
    let scale = match unit.strip_suffix("/s")? {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => MIB as f64,
        "GiB" => 1024.0 * MIB as f64,
        _ => return None,
    };
    Some(number.parse::<f64>().ok()? * scale)
}

#[test]
fn two_frames_and_a_rate() {
    let server = growing();
    let (code, stdout, stderr) = top("2", &[], &[server.addr()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stdout.contains('\x1b'),
        "no ANSI codes off a terminal: {stdout:?}"
    );
    let frames: Vec<&str> = stdout.split("tlcctl top").skip(1).collect();
    assert_eq!(frames.len(), 2, "{stdout}");
    assert!(frames[0].contains("refresh 1/2") && frames[1].contains("refresh 2/2"));
    // Frames are separated by a blank line.
    assert!(stdout.contains("\n\ntlcctl top"), "{stdout}");
    for frame in &frames {
        assert!(
            frame.contains(&format!("{}  ready  up 1m21s", server.addr())),
            "{frame}"
        );
        assert!(
            frame.contains("layer/w") && frame.contains("32.0x"),
            "{frame}"
        );
        assert!(frame.contains("TENSOR"), "{frame}");
    }
    // One poll gives no rate yet; the second has 10 MiB more raw and 1 MiB
    // more wire bytes after about 0.1 s.
    let first = push_row(frames[0]);
    assert_eq!(
        first,
        [
            "push",
            "3lc s=1.00",
            "10.0 MiB",
            "1.0 MiB",
            "87.0x",
            "-",
            "-"
        ]
    );
    let second = push_row(frames[1]);
    assert_eq!(
        second[..5],
        ["push", "3lc s=1.00", "20.0 MiB", "2.0 MiB", "87.0x"]
    );
    let raw = per_second(second[5]).unwrap_or_else(|| panic!("no raw rate: {second:?}"));
    let wire = per_second(second[6]).unwrap_or_else(|| panic!("no wire rate: {second:?}"));
    assert!(raw > MIB as f64 && raw < 1000.0 * MIB as f64, "{raw}");
    // Both rates come from the same interval; display rounding aside, 10:1.
    assert!((raw / wire - 10.0).abs() < 1.0, "{raw} {wire}");

    assert_eq!(server.count("/v1/status"), 2);
    assert_eq!(server.count("/v1/tensors?sort=wire_bytes&limit=20"), 2);
}

#[test]
fn json_frames_are_one_envelope_per_line() {
    let server = growing();
    let options = ["--sort", "tensor", "--limit", "3", "-o", "json"];
    let (code, stdout, stderr) = top("2", &options, &[server.addr()]);
    assert_eq!(code, 0, "{stderr}");
    let frames: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    assert_eq!(frames.len(), 2);
    let first = &frames[0]["results"][0];
    assert_eq!(first["target"], server.addr());
    assert_eq!(first["response"]["rates"]["push"], Value::Null);
    assert_eq!(first["response"]["tensors"][0]["tensor"], "layer/w");
    let push = &frames[1]["results"][0]["response"]["rates"]["push"];
    let raw = push["raw_bytes_per_second"].as_f64().expect("raw rate");
    let wire = push["wire_bytes_per_second"].as_f64().expect("wire rate");
    assert!(raw > 0.0 && (raw / wire - 10.0).abs() < 1e-6, "{push}");
    // Pull totals did not move: a rate of zero, not none.
    assert_eq!(
        frames[1]["results"][0]["response"]["rates"]["pull"]["raw_bytes_per_second"],
        0.0
    );
    assert!(server.count("/v1/tensors?sort=tensor&limit=3") > 0);
}

#[test]
fn a_target_down_shows_in_the_frame_and_fails_the_run() {
    let server = growing();
    let down = dead_addr();
    let (code, stdout, _) = top("1", &[], &[server.addr(), &down]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains(&format!("{down}  error: cannot reach tlcd admin at {down}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("TARGET"),
        "two targets give a TARGET column: {stdout}"
    );
}
