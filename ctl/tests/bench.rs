//! `tlcctl codec bench` on a small tensor (debug builds are slow).

mod common;

use common::{fails, gradient, tlcctl, Scratch};
use serde_json::Value;

fn bench_json(args: &[&str]) -> Vec<Value> {
    let output = tlcctl()
        .args([
            "codec",
            "bench",
            "--elements",
            "10000",
            "--iterations",
            "2",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

#[test]
fn default_rows_as_json() {
    let rows = bench_json(&[]);
    let codecs: Vec<&str> = rows.iter().map(|r| r["codec"].as_str().unwrap()).collect();
    assert_eq!(
        codecs,
        [
            "none", "fp16", "bf16", "int8", "terngrad", "onebit", "topk", "topk", "3lc", "3lc",
            "3lc", "3lc"
        ]
    );
    for row in &rows {
        for key in [
            "encode_gbps",
            "decode_gbps",
            "memcpy_gbps",
            "bits_per_value",
        ] {
            let v = row[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key} in {row}"));
            assert!(v > 0.0 && v.is_finite(), "{key} in {row}");
        }
        assert_eq!(row["elements"], 10000);
        assert_eq!(row["iterations"], 2);
    }
    let sparsities: Vec<f64> = rows.iter().filter_map(|r| r["sparsity"].as_f64()).collect();
    assert_eq!(sparsities, [1.0, 1.5, 1.75, 1.9]);
    let ks: Vec<f64> = rows.iter().filter_map(|r| r["k"].as_f64()).collect();
    assert_eq!(ks, [25.0, 5.0]);
    assert_eq!(rows[0]["bits_per_value"], 32.0);
    assert_eq!(rows[1]["bits_per_value"], 16.0);
    // Larger s, fewer bits.
    let bits: Vec<f64> = rows[8..]
        .iter()
        .map(|r| r["bits_per_value"].as_f64().unwrap())
        .collect();
    assert!(bits.windows(2).all(|w| w[1] <= w[0]), "{bits:?}");
    assert!(bits[0] < 2.0);
}

#[test]
fn chosen_rows_and_input_file() {
    let s = Scratch::new();
    let input = s.f32_file("g.f32", &gradient(5000, 1));
    let path = input.to_str().unwrap();
    let rows = bench_json(&["--codec", "3lc:1.25,topk:10", "--input", path]);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["sparsity"], 1.25);
    assert_eq!(rows[1]["k"], 10.0);
    // The file holds fewer values than --elements: all of them are used.
    assert_eq!(rows[0]["elements"], 5000);
}

#[test]
fn table_has_ratio_column() {
    let output = tlcctl()
        .args([
            "codec", "bench", "-n", "1000", "-i", "1", "--codec", "3lc:1.75",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("enc/memcpy") && text.contains("3lc s=1.75"),
        "{text}"
    );
}

#[test]
fn bad_rows_are_errors() {
    let line = fails(tlcctl().args(["codec", "bench", "-n", "10", "--codec", "3lc:2.5"]));
    assert!(line.contains("out of range [1.0, 2.0)"), "{line}");
    let line = fails(tlcctl().args(["codec", "bench", "-n", "10", "--codec", "int8:3"]));
    assert!(line.contains("takes no parameter"), "{line}");
}
