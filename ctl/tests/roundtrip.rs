//! Encode, decode and inspect through the `tlcctl` binary.

mod common;

use common::{codec, gradient, inspect_json, read_f32, tlcctl, Scratch};
use serde_json::Value;

/// Encodes `values` with `flags`, decodes, and returns (decoded, frame info).
fn round_trip(scratch: &Scratch, values: &[f32], flags: &[&str]) -> (Vec<f32>, Vec<Value>) {
    let input = scratch.f32_file("in.f32", values);
    let frames = scratch.path("out.tlc");
    let output = scratch.path("back.f32");
    codec("encode", flags, &input, &frames)
        .assert()
        .success()
        .stdout("");
    codec("decode", &[], &frames, &output).assert().success();
    (read_f32(&output), inspect_json(&frames))
}

fn max_abs(values: &[f32]) -> f32 {
    values.iter().fold(0.0, |m, v| m.max(v.abs()))
}

#[test]
fn none_is_exact() {
    let s = Scratch::new();
    let mut x = gradient(1000, 1);
    x[3] = f32::MAX;
    x[4] = -0.0;
    x[5] = f32::MIN_POSITIVE / 2.0;
    let (y, info) = round_trip(&s, &x, &["--codec", "none"]);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y), bits(&x));
    assert_eq!(info.len(), 1);
    assert_eq!(info[0]["codec"], "none");
    assert_eq!(info[0]["bits_per_value"], 32.0);
    assert_eq!(info[0]["scale"], Value::Null);
}

#[test]
fn lossy_codecs_stay_within_bounds() {
    let x = gradient(5000, 2);
    let m = max_abs(&x);
    // (flags, wire name, bound on |x - y| relative to max|x|)
    let cases: [(&[&str], &str, f32); 9] = [
        (&["--codec", "fp16"], "fp16", 1e-3),
        (&["--codec", "bf16"], "bf16", 1e-2),
        (&["--codec", "int8"], "int8", 0.5 / 127.0 + 1e-6),
        (
            &["--codec", "terngrad", "--seed", "9"],
            "terngrad",
            1.0 + 1e-6,
        ),
        (&["--codec", "onebit"], "onebit", 1.0 + 1e-6),
        (&["--codec", "topk"], "topk", 1.0 + 1e-6),
        (&["--codec", "topk5"], "topk", 1.0 + 1e-6),
        (&["--codec", "topk", "--k", "50"], "topk", 1.0 + 1e-6),
        (&["--codec", "3lc", "--sparsity", "1.5"], "3lc", 1.5 + 1e-6),
    ];
    for (flags, name, bound) in cases {
        let s = Scratch::new();
        let (y, info) = round_trip(&s, &x, flags);
        assert_eq!(y.len(), x.len(), "{flags:?}");
        assert_eq!(info.len(), 1);
        assert_eq!(info[0]["codec"], name, "{flags:?}");
        assert_eq!(info[0]["elements"], 5000);
        let worst = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(worst <= bound * m, "{flags:?}: error {worst} vs max {m}");
        assert!(y.iter().all(|v| v.is_finite()), "{flags:?}");
    }
}

#[test]
fn three_lc_values_are_zero_or_plus_minus_m() {
    let s = Scratch::new();
    let x = gradient(10_000, 3);
    let (y, info) = round_trip(&s, &x, &["--codec", "3lc", "--sparsity", "1.75"]);
    let frame = &info[0];
    assert_eq!(frame["sparsity"], 1.75);
    assert_eq!(frame["feedback"], true);
    let m = frame["scale"].as_f64().expect("scale") as f32;
    assert_eq!(m, max_abs(&x) * 1.75);
    assert!(y.iter().all(|&v| v == 0.0 || v == m || v == -m));
    assert!(y.iter().any(|&v| v != 0.0));
    assert!(frame["bits_per_value"].as_f64().unwrap() < 1.6);
}

#[test]
fn topk_and_onebit_extras() {
    let x = gradient(1000, 4);
    let s = Scratch::new();
    let (_, info) = round_trip(&s, &x, &["--codec", "topk25"]);
    assert_eq!(info[0]["percent"], 25.0);
    let kept = info[0]["kept"].as_u64().unwrap();
    assert!((200..=300).contains(&kept), "kept {kept}");
    let (y, info) = round_trip(&s, &x, &["--codec", "onebit", "--feedback", "off"]);
    assert_eq!(info[0]["feedback"], false);
    // JSON carries the f32 parameters in their shortest f32 form.
    let p = info[0]["positive"].as_f64().unwrap() as f32;
    let n = info[0]["negative"].as_f64().unwrap() as f32;
    assert!(p > 0.0 && n < 0.0);
    assert!(y.iter().all(|&v| v == p || v == n));
}

#[test]
fn chunks_share_one_encoder_and_offsets_add_up() {
    let s = Scratch::new();
    let (n, count) = (1000usize, 6usize);
    let x = gradient(n * count, 5);
    let (y, info) = round_trip(&s, &x, &["--codec", "3lc", "--chunk", "1000"]);
    assert_eq!(y.len(), x.len());
    assert_eq!(info.len(), count);
    let bytes = std::fs::read(s.path("out.tlc")).unwrap();
    let mut offset = 0u64;
    for (i, frame) in info.iter().enumerate() {
        for key in [
            "index",
            "offset",
            "codec",
            "elements",
            "scale",
            "sparsity",
            "feedback",
            "header_bytes",
            "payload_offset",
            "payload_bytes",
            "frame_bytes",
            "bits_per_value",
        ] {
            assert!(frame.get(key).is_some(), "frame {i} lacks {key}: {frame}");
        }
        let get = |key: &str| frame[key].as_u64().unwrap();
        assert_eq!(get("index"), i as u64);
        assert_eq!(get("offset"), offset);
        assert_eq!(get("elements"), n as u64);
        assert_eq!(frame["feedback"], true);
        assert_eq!(frame["sparsity"], 1.0);
        assert_eq!(get("payload_offset"), offset + get("header_bytes"));
        assert_eq!(
            get("header_bytes") + get("payload_bytes") + 4,
            get("frame_bytes")
        );
        // The header says where the payload is: magic at the frame's start,
        // payload length at bytes 16..20.
        let at = offset as usize;
        assert_eq!(&bytes[at..at + 4], b"TLCF");
        let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap());
        assert_eq!(u64::from(len), get("payload_bytes"));
        let bits = get("payload_bytes") as f64 * 8.0 / n as f64;
        assert!((frame["bits_per_value"].as_f64().unwrap() - bits).abs() < 1e-9);
        // Each frame decodes to {0, ±M} with its own M.
        let m = frame["scale"].as_f64().unwrap() as f32;
        assert!(y[i * n..(i + 1) * n]
            .iter()
            .all(|&v| v == 0.0 || v.abs() == m));
        offset += get("frame_bytes");
    }
    assert_eq!(offset, bytes.len() as u64);

    // Error feedback carried across tensors: the running sum of what was
    // sent tracks the running sum of the input, better than per-tensor error.
    let sent: f64 = y.iter().map(|&v| f64::from(v)).sum();
    let total: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let m_last = info[count - 1]["scale"].as_f64().unwrap();
    assert!((sent - total).abs() <= m_last * n as f64);
}

#[test]
fn feedback_flag_changes_frames() {
    let x = gradient(2000, 6);
    let s = Scratch::new();
    let (on, info_on) = round_trip(&s, &x, &["--codec", "3lc", "--chunk", "500"]);
    let (off, info_off) = round_trip(
        &s,
        &x,
        &["--codec", "3lc", "--chunk", "500", "--feedback", "off"],
    );
    assert!(info_on.iter().all(|f| f["feedback"] == true));
    assert!(info_off.iter().all(|f| f["feedback"] == false));
    // The first tensor sees an empty error buffer either way; later ones differ.
    assert_eq!(on[..500], off[..500]);
    assert_ne!(on[500..], off[500..]);
}

#[test]
fn empty_input_gives_empty_output() {
    let s = Scratch::new();
    let empty = s.f32_file("empty.tlc", &[]);
    let out = s.path("out.f32");
    codec("decode", &[], &empty, &out).assert().success();
    assert_eq!(std::fs::read(&out).unwrap().len(), 0);
    assert!(inspect_json(&empty).is_empty());
}

#[test]
fn inspect_table_lists_frames() {
    let s = Scratch::new();
    let input = s.f32_file("in.f32", &gradient(300, 7));
    let frames = s.path("out.tlc");
    let flags = ["--codec", "int8", "--chunk", "100"];
    codec("encode", &flags, &input, &frames).assert().success();
    let output = tlcctl()
        .args(["codec", "inspect"])
        .arg(&frames)
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].contains("codec") && lines[0].contains("bits/value"));
    assert!(lines[1..]
        .iter()
        .all(|l| l.contains("int8") && l.contains("8.000")));
}
