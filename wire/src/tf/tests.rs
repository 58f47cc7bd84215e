//! tlc's TensorFlow wire code against bytes from real TensorFlow 2.21.
//!
//! The fixtures live in `wire/tests/fixtures/tf/` (see its README.md):
//!
//! - `recv_*.bin`: `RecvTensorResponse`s written by TF's own C++ encoder
//!   (`grpc::EncodeTensorToByteBuffer`), via `tf_wire_oracle.cc`;
//! - `tensor_proto_*.pb` and `tensor_protos.json`: `TensorProto`s written by
//!   TF's Python side (`tf.make_tensor_proto`), via `gen_tensor_protos.py`;
//! - `built_*.bin`: what tlc builds from those, written by these tests when
//!   `TLC_REGEN_TF_FIXTURES` is set and compared byte for byte otherwise;
//! - `probe_*.bin`: responses laid out in ways tlc never writes;
//! - `oracle_parse.txt`: TF's own `TensorResponse::ParseFrom` run on every
//!   `.bin` file, saying whether it took the fast path (or crashed).

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use prost::Message;

use super::fast_parse::{self, NotFast};
use super::proto::{DataType, RecvTensorResponse, TensorProto};
use super::recv_tensor::{
    build_response_with_content, classify, decode_response, PassReason, ResponseMeta,
};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf")
}

fn read(name: &str) -> Bytes {
    let path = fixture_dir().join(name);
    match std::fs::read(&path) {
        Ok(data) => Bytes::from(data),
        Err(e) => panic!(
            "fixture {}: {e}; see tests/fixtures/tf/README.md",
            path.display()
        ),
    }
}

fn regenerating() -> bool {
    std::env::var_os("TLC_REGEN_TF_FIXTURES").is_some()
}

/// Something tlc built: written as fixture `name` when regenerating, else
/// compared with the committed file (whose TF verdict is in
/// `oracle_parse.txt`).
fn built(name: &str, data: &[u8]) {
    if regenerating() {
        std::fs::write(fixture_dir().join(name), data).unwrap();
    } else {
        assert!(
            read(name) == data,
            "{name} differs from what tlc builds now; run regen.sh"
        );
    }
}

/// The values `tf_wire_oracle.cc` puts in its float tensors:
/// `start + step * i` in `f32`.
fn oracle_values(n: usize, start: f32, step: f32) -> Vec<f32> {
    (0..n).map(|i| start + step * i as f32).collect()
}

/// TF's float responses: name, dims, start, step, require_ack.
const TF_FLOATS: [(&str, &[u64], f32, f32, bool); 4] = [
    ("f32_2x3", &[2, 3], -1.0, 0.5, false),
    ("f32_300", &[300], 0.0, 0.25, false),
    ("f32_4x5x6x7_ack", &[4, 5, 6, 7], 1.0, -0.125, true),
    ("f32_0x4", &[0, 4], 0.0, 0.0, false),
];

#[test]
fn tf_float_responses_are_rebuilt_byte_for_byte() {
    for (name, dims, start, step, ack) in TF_FLOATS {
        let wire = read(&format!("recv_{name}.bin"));
        fast_parse::check(&wire).unwrap();
        let response = decode_response(wire.clone()).unwrap();
        let tensor = classify(&response).unwrap_or_else(|r| panic!("{name}: {r}"));
        assert_eq!(tensor.dims, dims, "{name}");
        assert_eq!(tensor.meta.require_ack, ack, "{name}");
        assert!(
            tensor.meta.send_start_micros > 1_600_000_000_000_000,
            "{name}"
        );
        let n = tensor.element_count() as usize;
        assert_eq!(
            tensor.values().collect::<Vec<_>>(),
            oracle_values(n, start, step)
        );
        // tensor_content is a view into the received message.
        if !tensor.content.is_empty() {
            assert!(wire.as_ptr_range().contains(&tensor.content.as_ptr()));
        }
        let rebuilt = tensor.to_response().unwrap();
        assert!(rebuilt.to_vec() == wire, "{name}: not TF's bytes");
        built(&format!("built_recv_tf_{name}.bin"), &rebuilt.to_vec());
    }
}

#[test]
fn tf_scalar_lacks_a_shape_and_the_rebuild_adds_an_empty_one() {
    let wire = read("recv_f32_scalar.bin");
    // TF's own encoder leaves the shape out for a scalar, so its own fast
    // parser refuses the content (oracle_parse.txt: "slow").
    assert_eq!(fast_parse::check(&wire), Err(NotFast::ContentBeforeShape));
    let response = decode_response(wire.clone()).unwrap();
    let tensor = classify(&response).unwrap();
    assert!(tensor.dims.is_empty());
    assert_eq!(tensor.values().collect::<Vec<_>>(), vec![3.5]);
    let rebuilt = tensor.to_response().unwrap().to_vec();
    fast_parse::check(&rebuilt).unwrap();
    // The same bytes with `tensor_shape {}` (0x12 0x00) after the dtype.
    let tensor_at = wire.iter().position(|&b| b == 0x0a).unwrap();
    let mut want = wire[..tensor_at].to_vec();
    want.extend_from_slice(&[0x0a, wire[tensor_at + 1] + 2]);
    want.extend_from_slice(&wire[tensor_at + 2..tensor_at + 4]); // dtype
    want.extend_from_slice(&[0x12, 0x00]);
    want.extend_from_slice(&wire[tensor_at + 4..]);
    assert_eq!(rebuilt, want);
    built("built_recv_tf_f32_scalar.bin", &rebuilt);
}

#[test]
fn tf_responses_tlc_passes_through() {
    let reasons = [
        ("recv_f32_dead.bin", PassReason::Dead),
        (
            "recv_i64_3.bin",
            PassReason::NotFloat(DataType::DtInt64 as i32),
        ),
        (
            "recv_str_2.bin",
            PassReason::NotFloat(DataType::DtString as i32),
        ),
    ];
    for (file, reason) in reasons {
        let response = decode_response(read(file)).unwrap();
        assert_eq!(classify(&response), Err(reason), "{file}");
    }
    // A dead tensor still carries its meta.
    let dead = decode_response(read("recv_f32_dead.bin")).unwrap();
    assert!(ResponseMeta::of(&dead).is_dead);
    // TF encodes strings through the generic serializer: tensor first, and
    // its strings in tensor_content (varint lengths, then the bytes).
    let strings = read("recv_str_2.bin");
    assert_eq!(strings[0], 0x0a);
    let t = decode_response(strings).unwrap().tensor.unwrap();
    assert_eq!(&t.tensor_content[..], b"\x02\x00ab");
}

/// One fixture of `tensor_protos.json`.
struct PyFixture {
    dtype: i32,
    shape: Vec<i64>,
    representation: String,
    values: Vec<i64>,
}

fn python_fixtures() -> BTreeMap<String, PyFixture> {
    let json: serde_json::Value = serde_json::from_slice(&read("tensor_protos.json")).unwrap();
    let int = |v: &serde_json::Value| v.as_i64().or_else(|| v.as_u64().map(|u| u as i64)).unwrap();
    json["fixtures"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, f)| {
            let list = |key: &str| {
                f[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(int)
                    .collect::<Vec<i64>>()
            };
            (
                name.clone(),
                PyFixture {
                    dtype: int(&f["dtype"]) as i32,
                    shape: list("shape"),
                    representation: f["representation"].as_str().unwrap().to_owned(),
                    values: list("values"),
                },
            )
        })
        .collect()
}

/// The values of a decoded TensorProto, in the manifest's notation.
fn values_of(t: &TensorProto) -> Vec<i64> {
    let c = &t.tensor_content;
    match DataType::try_from(t.dtype) {
        Ok(DataType::DtFloat) if !t.float_val.is_empty() => {
            t.float_val.iter().map(|v| i64::from(v.to_bits())).collect()
        }
        Ok(DataType::DtFloat) => c
            .chunks_exact(4)
            .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        Ok(DataType::DtHalf) => c
            .chunks_exact(2)
            .map(|b| i64::from(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        Ok(DataType::DtInt64) => c
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        other => panic!("no fixture of dtype {other:?}"),
    }
}

#[test]
fn python_tensor_protos_decode_and_reencode_exactly() {
    let fixtures = python_fixtures();
    assert!(fixtures.len() >= 8);
    for (name, f) in &fixtures {
        let wire = read(&format!("tensor_proto_{name}.pb"));
        let t = TensorProto::decode(wire.clone()).unwrap();
        assert_eq!(t.dtype, f.dtype, "{name}");
        let shape = t.tensor_shape.clone().unwrap_or_default();
        let dims: Vec<i64> = shape.dim.iter().map(|d| d.size).collect();
        assert_eq!(dims, f.shape, "{name}");
        let representation = if !t.tensor_content.is_empty() {
            "tensor_content"
        } else if !t.float_val.is_empty() {
            "float_val"
        } else {
            "none"
        };
        assert_eq!(representation, f.representation, "{name}");
        assert_eq!(values_of(&t), f.values, "{name}");
        // Nothing dropped: prost writes back the very bytes TF wrote.
        assert!(t.encode_to_vec() == wire, "{name}: re-encoding differs");
    }
}

#[test]
fn python_tensor_protos_classify_and_rebuild() {
    let fixtures = python_fixtures();
    let micros = 1_700_000_000_000_000;
    for (name, f) in &fixtures {
        let t = TensorProto::decode(read(&format!("tensor_proto_{name}.pb"))).unwrap();
        let response = RecvTensorResponse {
            tensor: Some(t),
            send_start_micros: micros,
            ..Default::default()
        };
        let expected = match name.as_str() {
            "f32_scalar" => Err(PassReason::NoContent),
            "i64_3" => Err(PassReason::NotFloat(DataType::DtInt64 as i32)),
            "f16_2" => Err(PassReason::NotFloat(DataType::DtHalf as i32)),
            _ => Ok(()),
        };
        let classified = classify(&response);
        assert_eq!(
            classified.as_ref().map(|_| ()).map_err(Clone::clone),
            expected,
            "{name}"
        );
        let Ok(tensor) = classified else { continue };
        let bits: Vec<i64> = tensor.values().map(|v| i64::from(v.to_bits())).collect();
        assert_eq!(bits, f.values, "{name}");
        let rebuilt = tensor.to_response().unwrap().to_vec();
        fast_parse::check(&rebuilt).unwrap();
        // Decodes back to the same tensor.
        let again = decode_response(Bytes::from(rebuilt.clone())).unwrap();
        assert_eq!(classify(&again).unwrap(), tensor, "{name}");
        built(&format!("built_recv_py_{name}.bin"), &rebuilt);
    }
}

#[test]
fn envelope_sample() {
    // What TF would do if a sidecar-to-sidecar envelope ever reached it:
    // oracle_parse.txt records TF's answer for this file.
    let meta = ResponseMeta {
        send_start_micros: 1_700_000_000_000_000,
        ..Default::default()
    };
    let enc = build_response_with_content(
        &meta,
        &[2, 3],
        DataType::DtFloat as i32,
        Bytes::from_static(b"TLC envelope"),
    )
    .unwrap();
    assert_eq!(
        fast_parse::check(&enc.to_vec()),
        Err(NotFast::ContentSize {
            expected: 24,
            actual: 12
        })
    );
    built("built_envelope.bin", &enc.to_vec());
}

/// 64-bit FNV-1a, as `tf_wire_oracle.cc` prints it.
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn tf_parser_verdicts_agree() {
    if regenerating() {
        return; // regen.sh writes oracle_parse.txt after this run
    }
    let text = String::from_utf8(read("oracle_parse.txt").to_vec()).unwrap();
    let mut seen = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [file, verdict, dtype, shape, nbytes, hash] = fields[..] else {
            panic!("bad line in oracle_parse.txt: {line}");
        };
        let wire = read(file);
        let ours = fast_parse::check(&wire);
        assert_eq!(
            ours.is_ok(),
            verdict == "fast",
            "{file}: TF says {verdict}, we say {ours:?}"
        );
        // TF aborts exactly where fast_parse says it would.
        assert_eq!(
            verdict == "crash",
            matches!(ours, Err(NotFast::Aborts(_))),
            "{file}: TF says {verdict}, we say {ours:?}"
        );
        if file.starts_with("built_recv_") {
            // Every response tlc builds for TF takes TF's fast path, and TF
            // reads exactly our content.
            assert_eq!(verdict, "fast", "{file}");
            let t = classify(&decode_response(wire).unwrap()).unwrap();
            assert_eq!(dtype, "float", "{file}");
            let dims: Vec<String> = t.dims.iter().map(u64::to_string).collect();
            assert_eq!(shape, format!("[{}]", dims.join(",")), "{file}");
            assert_eq!(nbytes.parse::<usize>().unwrap(), t.content.len(), "{file}");
            assert_eq!(hash, format!("{:016x}", fnv1a64(&t.content)), "{file}");
        }
        if file == "built_envelope.bin" {
            assert_eq!(verdict, "error", "TF must refuse a leaked envelope");
        }
        seen += 1;
    }
    // Every recv_ and built_ file has a verdict.
    let on_disk = std::fs::read_dir(fixture_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".bin"))
        .count();
    assert_eq!(seen, on_disk, "oracle_parse.txt is stale; run regen.sh");
}

/// Responses laid out in ways tlc never writes, to pin down where TF's fast
/// parser draws its line: `fast_parse` must agree with TF's verdict on each
/// (checked in `tf_parser_verdicts_agree`).
#[test]
fn probe_samples() {
    use super::proto::{Any, Dim, TensorShapeProto};

    let f32_2 = |content: &[u8]| TensorProto {
        dtype: DataType::DtFloat as i32,
        tensor_shape: Some(TensorShapeProto {
            dim: vec![Dim {
                size: 2,
                name: String::new(),
            }],
            unknown_rank: false,
        }),
        tensor_content: Bytes::copy_from_slice(content),
        ..Default::default()
    };
    let values = [0u8, 0, 0x80, 0x3f, 0, 0, 0, 0x40]; // 1.0, 2.0
    let response = |t: TensorProto| RecvTensorResponse {
        tensor: Some(t),
        send_start_micros: 1_700_000_000_000_000,
        ..Default::default()
    };

    let mut probes: Vec<(&str, Vec<u8>, bool)> = Vec::new();
    // prost's canonical order (tensor first) with every meta field set.
    let mut all_meta = response(f32_2(&values));
    all_meta.is_dead = true;
    all_meta.require_ack = true;
    all_meta.transport_options = Some(Any {
        type_url: "type.googleapis.com/x".into(),
        value: Bytes::from_static(b"\x08\x01"),
    });
    probes.push(("prost_all_meta", all_meta.encode_to_vec(), true));
    // version_number is read by the fast path.
    let mut t = f32_2(&values);
    t.version_number = 1;
    probes.push(("version_number", response(t).encode_to_vec(), true));
    // A dim name inside the shape is parsed generically.
    let mut t = f32_2(&values);
    t.tensor_shape.as_mut().unwrap().dim[0].name = "batch".into();
    probes.push(("dim_name", response(t).encode_to_vec(), true));
    // Values in float_val instead of tensor_content.
    let mut t = f32_2(&[]);
    t.float_val = vec![1.0, 2.0];
    probes.push(("float_val", response(t).encode_to_vec(), false));
    // An unknown response field (6).
    let mut wire = response(f32_2(&values)).encode_to_vec();
    wire.extend_from_slice(&[0x30, 0x01]);
    probes.push(("unknown_field_6", wire, false));
    // Content before shape: tensor { dtype, content, shape }.
    let mut t = vec![0x08, 0x01, 0x22, 0x08];
    t.extend_from_slice(&values);
    t.extend_from_slice(&[0x12, 0x04, 0x12, 0x02, 0x08, 0x02]);
    let mut wire = vec![0x0a, t.len() as u8];
    wire.extend_from_slice(&t);
    probes.push(("content_before_shape", wire, false));
    // Dtype after content: tensor { shape, content, dtype }.
    let mut t = vec![0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x22, 0x08];
    t.extend_from_slice(&values);
    t.extend_from_slice(&[0x08, 0x01]);
    let mut wire = vec![0x0a, t.len() as u8];
    wire.extend_from_slice(&t);
    probes.push(("dtype_after_content", wire, false));
    // No dtype: a canonical encoding of a DT_INVALID tensor, a tensor with
    // only a shape, an empty tensor. TF aborts on these (verdict "crash").
    let mut t = f32_2(&values);
    t.dtype = 0;
    probes.push(("no_dtype", response(t).encode_to_vec(), false));
    probes.push(("shape_only", vec![0x0a, 0x02, 0x12, 0x00], false));
    probes.push(("empty_tensor", vec![0x0a, 0x00], false));
    // No tensor at all: the fast path accepts it (and yields no tensor).
    probes.push(("no_tensor", vec![0x10, 0x01, 0x18, 0x01], true));
    // Shapes that describe no concrete tensor.
    let mut t = f32_2(&values);
    t.tensor_shape.as_mut().unwrap().dim[0].size = -1;
    probes.push(("negative_dim", response(t).encode_to_vec(), false));
    let mut t = f32_2(&values);
    t.tensor_shape.as_mut().unwrap().unknown_rank = true;
    probes.push(("unknown_rank", response(t).encode_to_vec(), true));
    let mut t = f32_2(&values);
    t.tensor_shape.as_mut().unwrap().dim = vec![
        Dim {
            size: 1 << 40,
            name: String::new(),
        };
        2
    ];
    probes.push(("huge_dims", response(t).encode_to_vec(), false));
    let mut t = f32_2(&values[..4]);
    t.tensor_shape.as_mut().unwrap().dim = vec![
        Dim {
            size: 1,
            name: String::new(),
        };
        255
    ];
    probes.push(("255_dims", response(t).encode_to_vec(), false));
    // A shape that TF tries to allocate (1 TiB) before it compares sizes.
    let mut t = f32_2(&values);
    t.tensor_shape.as_mut().unwrap().dim[0].size = 1 << 38;
    probes.push(("huge_alloc", response(t).encode_to_vec(), false));
    // Content one element short.
    probes.push((
        "short_content",
        response(f32_2(&values[..4])).encode_to_vec(),
        false,
    ));

    for (name, wire, fast) in probes {
        assert_eq!(fast_parse::check(&wire).is_ok(), fast, "{name}");
        built(&format!("probe_{name}.bin"), &wire);
    }
}
