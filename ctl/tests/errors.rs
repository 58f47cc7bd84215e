//! Bad input gives one clear line on stderr and a non-zero exit.

mod common;

use std::path::Path;

use common::{codec, fails, gradient, tlcctl, Scratch};

/// Encodes a small 3lc file of `chunks` tensors and returns its bytes.
fn frames(s: &Scratch, chunks: usize) -> Vec<u8> {
    let input = s.f32_file("in.f32", &gradient(100 * chunks, 11));
    let out = s.path("good.tlc");
    let flags = ["--codec", "3lc", "--chunk", "100"];
    codec("encode", &flags, &input, &out).assert().success();
    std::fs::read(out).unwrap()
}

/// The error line of `tlcctl codec ACTION FLAGS... INPUT` writing to
/// `s`'s `out`.
fn codec_fails(s: &Scratch, action: &str, flags: &[&str], input: &Path) -> String {
    fails(&mut codec(action, flags, input, &s.path("out")))
}

#[test]
fn missing_input_file() {
    let s = Scratch::new();
    let line = codec_fails(&s, "encode", &[], &s.path("nope.f32"));
    assert!(line.contains("nope.f32"), "{line}");
    assert!(!s.path("out").exists());
    let line = codec_fails(&s, "decode", &[], &s.path("nope"));
    assert!(line.contains("cannot read"), "{line}");
}

#[test]
fn length_not_a_multiple_of_four() {
    let s = Scratch::new();
    let path = s.path("odd.f32");
    std::fs::write(&path, [0u8; 10]).unwrap();
    let line = codec_fails(&s, "encode", &[], &path);
    assert!(
        line.contains("odd.f32") && line.contains("10 bytes"),
        "{line}"
    );
    assert!(!s.path("out").exists());
}

#[test]
fn length_not_a_multiple_of_the_chunk() {
    let s = Scratch::new();
    let input = s.f32_file("in.f32", &gradient(10, 1));
    let line = codec_fails(&s, "encode", &["--chunk", "3"], &input);
    assert!(
        line.contains("--chunk 3") && line.contains("10 values"),
        "{line}"
    );
}

#[test]
fn sparsity_out_of_range() {
    let s = Scratch::new();
    let input = s.f32_file("in.f32", &gradient(10, 1));
    let line = codec_fails(
        &s,
        "encode",
        &["--codec", "3lc", "--sparsity", "2.5"],
        &input,
    );
    assert!(line.contains("out of range [1.0, 2.0)"), "{line}");
}

#[test]
fn settings_for_the_wrong_codec() {
    let s = Scratch::new();
    let input = s.f32_file("in.f32", &gradient(10, 1));
    let cases: [(&[&str], &str); 4] = [
        (
            &["--codec", "int8", "--sparsity", "1.5"],
            "--sparsity applies only to --codec 3lc",
        ),
        (
            &["--codec", "3lc", "--k", "5"],
            "--k applies only to --codec topk",
        ),
        (
            &["--codec", "topk", "--seed", "1"],
            "--seed applies only to --codec terngrad",
        ),
        (&["--codec", "gzip"], "unknown codec 'gzip'"),
    ];
    for (flags, want) in cases {
        let line = codec_fails(&s, "encode", flags, &input);
        assert!(line.contains(want), "{flags:?}: {line}");
    }
}

#[test]
fn non_finite_input_names_the_tensor() {
    let s = Scratch::new();
    let mut x = gradient(30, 1);
    x[25] = f32::NAN;
    let input = s.f32_file("in.f32", &x);
    let line = codec_fails(&s, "encode", &["--codec", "3lc", "--chunk", "10"], &input);
    assert!(
        line.contains("tensor 2") && line.contains("non-finite"),
        "{line}"
    );
    assert!(!s.path("out").exists(), "no half-written output");
}

#[test]
fn corrupted_frame_fails_the_checksum() {
    let s = Scratch::new();
    let mut bytes = frames(&s, 3);
    let second = bytes.len() / 3 + 10;
    bytes[second] ^= 0x40;
    let bad = s.path("bad.tlc");
    std::fs::write(&bad, &bytes).unwrap();
    let out = s.path("out.f32");
    let line = fails(&mut codec("decode", &[], &bad, &out));
    assert!(line.contains("checksum mismatch"), "{line}");
    assert!(line.contains("byte offset"), "{line}");
    assert!(!out.exists(), "no half-written output");
    let line = fails(tlcctl().args(["codec", "inspect", "--json"]).arg(&bad));
    assert!(line.contains("checksum mismatch"), "{line}");
}

#[test]
fn truncated_frame() {
    let s = Scratch::new();
    let bytes = frames(&s, 2);
    for cut in [1, 5, bytes.len() / 2 + 3] {
        let bad = s.path("cut.tlc");
        std::fs::write(&bad, &bytes[..bytes.len() - cut]).unwrap();
        let line = codec_fails(&s, "decode", &[], &bad);
        assert!(line.contains("truncated"), "{line}");
        assert!(
            line.contains("frame 1") || line.contains("frame 0"),
            "{line}"
        );
    }
}

#[test]
fn garbage_is_not_a_frame() {
    let s = Scratch::new();
    let bad = s.path("bad.tlc");
    std::fs::write(&bad, b"this is not a tlc frame at all").unwrap();
    let line = fails(tlcctl().args(["codec", "inspect"]).arg(&bad));
    assert!(
        line.contains("frame 0 at byte offset 0") && line.contains("magic"),
        "{line}"
    );
}

#[test]
fn element_limit() {
    let s = Scratch::new();
    let bytes = frames(&s, 1);
    let path = s.path("one.tlc");
    std::fs::write(&path, bytes).unwrap();
    let line = codec_fails(&s, "decode", &["--max-elements", "99"], &path);
    assert!(line.contains("above the limit of 99"), "{line}");
}

#[test]
fn usage_errors_exit_2() {
    tlcctl()
        .args(["codec", "encode", "--feedback", "maybe", "a", "b"])
        .assert()
        .code(2);
    tlcctl()
        .args(["codec", "encode", "--chunk", "0", "a", "b"])
        .assert()
        .code(2);
    tlcctl().args(["codec", "frobnicate"]).assert().code(2);
}
