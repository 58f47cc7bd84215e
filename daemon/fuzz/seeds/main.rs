//! Writes the seed corpus of every fuzz target of the workspace's fuzz
//! crates (this one, `wire/fuzz`, `context/fuzz`, `proxy/fuzz`), one directory
//! per target under DIR (`DIR/envelope`, `DIR/config`, ...): bytes the
//! daemon itself writes, bytes recorded from real TensorFlow
//! (`../tests/fixtures/`), and the examples of the README and
//! ADMIN-API.md. Each seed already carries its target's leading bytes
//! (mode, declared shape, endpoint) where the target takes some.
//!
//!     cargo run --bin seeds -- corpus
//!
//! An ordinary binary (stable Rust, no fuzzing flags). Existing files of
//! the same name are overwritten; other corpus entries are left alone.

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;
use tlc_codec::{Codec, EntropyStage, Feedback, Sparsity};
use tlc_context::pull::PullSource;
use tlc_context::{encode_stateless, PassScale, PushContext, Refinement};
use tlc_demo::wire;
use tlc_proxy::handover::{Hello, Manifest, ManifestEntry, Purpose, Ready};
use tlc_wire::hop;
use tlc_wire::tf::grpc;
use tlc_wire::tf::proto::{
    DataType, Dim, RecvTensorRequest, RecvTensorResponse, TensorProto, TensorShapeProto,
};
use tlc_wire::tf::recv_tensor::ResponseMeta;
use tlc_wire::tf::recv_tensor::{build_response_with_content, build_standard_response};

type Seeds = Vec<(String, Vec<u8>)>;
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Rendezvous keys as TF writes them: from the tests and from the recorded
/// job (see `rendezvous_keys` for those).
const KEYS: &[&str] = &[
    "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_3_g;0:0",
    "/job:ps/replica:0/task:0/device:CPU:0;0000000000000001;/job:worker/replica:0/task:1/device:CPU:0;edge_12_w1/read;0:0",
    "/job:worker/replica:0/task:1/device:CPU:0;a3f4b2c1d0e9f8a7;/job:ps/replica:0/task:0/device:CPU:0;edge_345_gradients/dense_1/MatMul_grad/MatMul_1;0:0",
    "/job:localhost/replica:0/task:0/device:GPU:1;1;/cpu:0;edge_3_v;0:0",
    "/job:a/replica:0/task:0/device:CPU:0;1;/job:b/replica:0/task:0/device:CPU:0;n;18446744073709551615:-1",
    "/task:1/job:ps/replica:0/device:CPU:0;ffffffffffffffff;/job:chief_1/replica:2/task:3;edge_60_MatMul/ReadVariableOp;3:7",
];

fn main() -> Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: seeds DIR")?);
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../wire/tests/fixtures");
    let envelopes = envelope()?;
    let targets: [(&str, Seeds); 16] = [
        ("compact_envelope", compact_envelope(&envelopes)?),
        ("envelope", envelopes),
        ("hop_body", hop_body(&fixtures)?),
        ("row_ids", row_ids(&fixtures)?),
        ("rows_envelope", rows_envelope()),
        ("graph_registration", graph_registration(&fixtures)?),
        ("recv_tensor_request", recv_tensor_request(&fixtures)?),
        ("recv_tensor_response", recv_tensor_response(&fixtures)?),
        ("rendezvous_key", rendezvous_key(&fixtures)?),
        ("peer_headers", tlc_headers()),
        ("fallback_call", tlc_headers()),
        ("admin_json", admin_json()),
        ("config", config()),
        ("admin_headers", admin_headers()),
        ("handover_manifest", handover_manifest()),
        ("mux_frames", mux_frames()),
    ];
    for (target, seeds) in targets {
        let out = dir.join(target);
        std::fs::create_dir_all(&out)?;
        for (name, bytes) in &seeds {
            std::fs::write(out.join(name), bytes)?;
        }
        eprintln!("{:>4} seeds in {}", seeds.len(), out.display());
    }
    Ok(())
}

/// Envelopes the daemon writes (a keyframe, chains from the target's
/// replica state, a push in every codec, refined 3LC pushes of several
/// frames), each after the mode byte 1 (fix checksums after mutation) and
/// the element count its response would declare.
fn envelope() -> Result<Seeds> {
    let mut seeds: Vec<(String, u32, Vec<u8>)> = Vec::new();
    let three_lc = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    let refine = Refinement {
        target: 0.001,
        max_passes: 8,
        scale: PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: tlc_context::Regimes::OFF,
    };

    // Pulls from the fuzz target's replica state: epoch 1, version 1,
    // eight values of 0.5.
    let mut source = PullSource::new(NonZeroU64::MIN, 8);
    let mut value = vec![0.5f32; 8];
    let mut out = Vec::new();
    source.serve(&value, None, Codec::None, Refinement::OFF, 1, &mut out)?;
    seeds.push(("keyframe".into(), 8, out));
    let state = |v: u64| {
        Some(tlc_context::ReplicaState {
            epoch: 1,
            version: v,
        })
    };
    for (step, r) in [(1, Refinement::OFF), (2, refine)] {
        for (i, v) in value.iter_mut().enumerate() {
            *v += (i as f32 - 3.5) * 0.01 * step as f32;
        }
        let mut out = Vec::new();
        source.serve(&value, state(1), three_lc, r, 2, &mut out)?;
        seeds.push((format!("chain-{step}"), 8, out));
    }

    // Pushes, one per codec, and refined 3LC pushes.
    let gradient: Vec<f32> = (0..1000)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
        .collect();
    for codec in [
        Codec::None,
        Codec::Fp16,
        Codec::Bf16,
        Codec::Int8,
        Codec::Int8Rows { row_len: 10 },
        Codec::OneBit,
        Codec::TernGrad { seed: 1 },
        three_lc,
    ] {
        let mut out = Vec::new();
        encode_stateless(&gradient, codec, EntropyStage::Off, 3, &mut out)?;
        seeds.push((format!("push-{}", codec.id().name()), 1000, out));
    }
    let mut context = PushContext::new(three_lc, Feedback::On);
    for step in 0..3 {
        let mut out = Vec::new();
        context.encode(&gradient, three_lc, refine, 4 + step, &mut out)?;
        seeds.push((format!("push-refined-{step}"), 1000, out));
    }
    // A zero-run 3LC push of the largest tensor the target's limits allow.
    let zeros = vec![0f32; 1 << 18];
    let mut out = Vec::new();
    encode_stateless(&zeros, three_lc, EntropyStage::Off, 5, &mut out)?;
    seeds.push(("push-zeros-max".into(), 1 << 18, out));

    Ok(seeds
        .into_iter()
        .map(|(name, declared, bytes)| {
            let mut seed = vec![1u8];
            seed.extend_from_slice(&declared.to_le_bytes());
            seed.extend_from_slice(&bytes);
            (name, seed)
        })
        .collect())
}

/// The envelope seeds in their compact form, as the holder's sidecar sends
/// them to a requester that reads it: the same mode byte (fix the checksum
/// after mutation) and declared element count, then the compact envelope.
fn compact_envelope(envelopes: &Seeds) -> Result<Seeds> {
    let mut seeds = Seeds::new();
    for (name, seed) in envelopes {
        let (head, envelope) = seed.split_at(5);
        let mut compact = head.to_vec();
        tlc_wire::compact::pack(envelope, &mut compact)?;
        seeds.push((name.clone(), compact));
    }
    Ok(seeds)
}

/// gRPC bodies as they cross the hop: the recorded requests and responses
/// (at most 32 KiB) and a body of three control messages, each as it is
/// (mode 1: framing fixed after mutation, no limit) and as
/// `hop::compress_body` packs it (mode 7: framing fixed, the body's length
/// as the limit); the control body with its first message as the
/// reference (mode 9); and one zstd frame on its own (mode 0).
fn hop_body(fixtures: &Path) -> Result<Seeds> {
    let mut bodies = Vec::new();
    for suffix in [".request.grpc", ".response.grpc"] {
        for (name, bytes) in files(&fixtures.join("captured"), suffix)? {
            if bytes.len() <= 32 << 10 {
                bodies.push((format!("{name}{}", suffix.trim_end_matches(".grpc")), bytes));
            }
        }
    }
    let mut control = Vec::new();
    for (i, key) in KEYS.iter().take(3).enumerate() {
        control.extend_from_slice(&wire::request_body(key, i as i64 + 1));
    }
    let mut seeds = vec![("control-ref".to_string(), [&[9u8][..], &control].concat())];
    bodies.push(("control".into(), control));
    for (name, body) in bodies {
        if let Some((packed, _)) = hop::compress_body(&body) {
            seeds.push((format!("{name}-packed"), [&[7u8][..], &packed].concat()));
        }
        seeds.push((name, [&[1u8][..], &body].concat()));
    }
    let mut frame = Vec::new();
    let message = wire::request_body(KEYS[2], 9);
    if hop::compress(&message, &mut frame) {
        seeds.push(("frame".into(), [&[0u8][..], &frame].concat()));
    }
    Ok(seeds)
}

/// `RecvTensor` responses of row ids as TF sends them (int64 and int32, in
/// `tensor_content` and in the typed fields, a scalar, a dead one, the
/// recorded int64 step and a float pull), after the mode bytes: the
/// sidecar's bound for 1 MiB (0) or a bound of 255 (2).
fn row_ids(fixtures: &Path) -> Result<Seeds> {
    let tensor = |dtype: DataType, dims: &[i64], content: Vec<u8>| TensorProto {
        dtype: dtype as i32,
        tensor_shape: Some(TensorShapeProto {
            dim: dims
                .iter()
                .map(|&size| Dim {
                    size,
                    ..Dim::default()
                })
                .collect(),
            ..TensorShapeProto::default()
        }),
        tensor_content: Bytes::from(content),
        ..TensorProto::default()
    };
    let response = |tensor: TensorProto| RecvTensorResponse {
        tensor: Some(tensor),
        send_start_micros: 1_700_000_000_000_000,
        ..RecvTensorResponse::default()
    };
    let ids: [i64; 6] = [4711, 3, 3, 0, -1, 1 << 40];
    let int64: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let int32: Vec<u8> = ids.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
    let mut typed = tensor(DataType::DtInt64, &[6], Vec::new());
    typed.int64_val = ids.to_vec();
    let mut typed32 = tensor(DataType::DtInt32, &[2, 3], Vec::new());
    typed32.int_val = ids.iter().map(|&v| v as i32).collect();
    let mut scalar = tensor(DataType::DtInt64, &[], Vec::new());
    scalar.tensor_shape = None;
    scalar.int64_val = vec![42];
    let mut dead = response(tensor(DataType::DtInt64, &[0], Vec::new()));
    dead.is_dead = true;
    let mut messages = vec![
        (
            "int64".to_string(),
            response(tensor(DataType::DtInt64, &[6], int64.clone())).encode_to_vec(),
        ),
        (
            "int64-2d".into(),
            response(tensor(DataType::DtInt64, &[3, 2], int64)).encode_to_vec(),
        ),
        (
            "int32".into(),
            response(tensor(DataType::DtInt32, &[6], int32)).encode_to_vec(),
        ),
        ("int64-val".into(), response(typed).encode_to_vec()),
        ("int32-val".into(), response(typed32).encode_to_vec()),
        ("scalar".into(), response(scalar).encode_to_vec()),
        ("dead".into(), dead.encode_to_vec()),
    ];
    for name in ["int64_global_step", "pull_w0_b1_read"] {
        let body = std::fs::read(
            fixtures
                .join("captured")
                .join(format!("{name}.response.grpc")),
        )?;
        let message = grpc::parse_single(Bytes::from(body), 1 << 20)?;
        messages.push((name.into(), message.to_vec()));
    }
    let mut seeds = Seeds::new();
    for (name, message) in messages {
        for mode in [0u8, 2] {
            seeds.push((
                format!("{name}-{mode}"),
                [&[mode, 255][..], &message].concat(),
            ));
        }
    }
    Ok(seeds)
}

/// Plans for the `rows_envelope` target (it reads any bytes as one): each
/// flag byte's combination (rows pull or push, the holder's envelope or
/// one by hand, entropy stage, frames resealed, the declared limit, small
/// ids) before the same stretch of pseudo-random bytes, in three lengths.
fn rows_envelope() -> Seeds {
    let mut x = 0x2545_f491u32;
    let stream: Vec<u8> = (0..512)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    let mut seeds = Seeds::new();
    for flags in [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 33] {
        for len in [48, 160, 512] {
            seeds.push((
                format!("plan-{flags:02x}-{len}"),
                [&[flags][..], &stream[..len]].concat(),
            ));
        }
    }
    seeds
}

/// Registrations recorded from TF (`graphs/*.pb`), after a chunk size of 64.
fn graph_registration(fixtures: &Path) -> Result<Seeds> {
    let mut seeds = Seeds::new();
    for (name, bytes) in files(&fixtures.join("graphs"), ".pb")? {
        let mut seed = vec![64u8];
        seed.extend_from_slice(&bytes);
        seeds.push((name, seed));
    }
    Ok(seeds)
}

/// Requests recorded from TF, and requests for the keys above, after the
/// mode byte: 0 (as they are) and 1 (prefix fixed after mutation; chunks of
/// 8 bytes as the sidecar peeks them... any size: the byte's upper bits).
fn recv_tensor_request(fixtures: &Path) -> Result<Seeds> {
    let mut seeds = Seeds::new();
    for (name, bytes) in files(&fixtures.join("captured"), ".request.grpc")? {
        seeds.push((format!("{name}-0"), [&[0u8][..], &bytes].concat()));
        seeds.push((format!("{name}-1"), [&[17u8][..], &bytes].concat()));
    }
    for (i, key) in KEYS.iter().enumerate() {
        let body = wire::request_body(key, i as i64 + 1);
        seeds.push((format!("key-{i}"), [&[1u8][..], &body].concat()));
    }
    Ok(seeds)
}

/// Responses recorded from TF (at most 32 KiB), TF's own encodings from
/// the wire fixtures (`tf/recv_*.bin`, framed here), and responses tlc
/// builds; after the mode byte 1 (prefix fixed after mutation).
fn recv_tensor_response(fixtures: &Path) -> Result<Seeds> {
    let mut seeds = Seeds::new();
    let mut add = |name: String, body: &[u8]| seeds.push((name, [&[1u8][..], body].concat()));
    for (name, bytes) in files(&fixtures.join("captured"), ".response.grpc")? {
        if bytes.len() <= 32 << 10 {
            add(name, &bytes);
        }
    }
    for (name, bytes) in files(&fixtures.join("tf"), ".bin")? {
        if (name.starts_with("recv_") || name.starts_with("probe_")) && bytes.len() <= 32 << 10 {
            add(name, &framed(&bytes)?);
        }
    }
    let meta = ResponseMeta {
        send_start_micros: 1_700_000_000_000_000,
        ..ResponseMeta::default()
    };
    for dims in [&[][..], &[0, 4], &[2, 3], &[3, 1, 2]] {
        let count: u64 = dims.iter().product();
        let content: Vec<u8> = (0..count)
            .flat_map(|i| (i as f32 * 0.25 - 1.0).to_le_bytes())
            .collect();
        let built = build_standard_response(&meta, dims, Bytes::from(content))?;
        add(format!("built-{dims:?}"), &framed(&built.to_vec())?);
    }
    let envelope = build_response_with_content(&meta, &[2, 3], 1, Bytes::from_static(b"TLCE"))?;
    add("built-envelope".into(), &framed(&envelope.to_vec())?);
    Ok(seeds)
}

/// The keys above and the keys of the recorded requests.
fn rendezvous_key(fixtures: &Path) -> Result<Seeds> {
    let mut seeds: Seeds = KEYS
        .iter()
        .enumerate()
        .map(|(i, key)| (format!("key-{i}"), key.as_bytes().to_vec()))
        .collect();
    for (name, bytes) in files(&fixtures.join("captured"), ".request.grpc")? {
        let message = grpc::parse_single(Bytes::from(bytes), 1 << 20)?;
        let request = RecvTensorRequest::decode(message)?;
        seeds.push((name, request.rendezvous_key.into_bytes()));
    }
    Ok(seeds)
}

/// Header values in the target's order (replica, class, max, peer,
/// envelope, fallback), one per line, as sidecars send them.
fn tlc_headers() -> Seeds {
    [
        ("requester", "1-2\ndense_read\n2147483648\n1\n\n"),
        (
            "function",
            "deadbeef01234567-42\ndense_gradient;fn;accumulated\n0\n1\n1\n",
        ),
        (
            "sparse",
            "\nsparse;accumulated\n99999999999999999999\n\n1\n",
        ),
        ("fallback", "\n\n\n1\n\n0123456789abcdef"),
        ("fallback-short", "\n\n\n1\n\nff"),
        ("junk", "-5\nDENSE_READ\n-1\n2\n0\n+1"),
    ]
    .into_iter()
    .map(|(name, text)| (name.to_string(), text.as_bytes().to_vec()))
    .collect()
}

/// The examples of ADMIN-API.md and the README, after the endpoint byte
/// (0 PATCH /v1/config, 1 POST /v1/policy, 2 PUT /v1/log-level).
fn admin_json() -> Seeds {
    [
        ("patch", 0, r#"{"policy.push.sparsity": 1.75, "policy.min_bytes": 131072}"#),
        ("patch-remove", 0, r#"{"policy.push.sparsity": null}"#),
        ("patch-overrides", 0, r#"{"policy.overrides": [{"tensor": "*b*", "direction": "push", "sparsity": 1.5}, {"tensor": "*c*", "skip": true}]}"#),
        ("patch-contexts", 0, r#"{"contexts.memory_mib": 128, "contexts.idle_seconds": 60}"#),
        ("patch-refused", 0, r#"{"contexts.memory_mib": 99999999, "routes": []}"#),
        ("patch-table", 0, r#"{"policy.pull": {"codec": "topk", "k": 5}}"#),
        ("policy", 1, r#"{"direction": "push", "sparsity": 1.75}"#),
        ("policy-tensor", 1, r#"{"direction": "push", "tensor": "*dense*", "codec": "3lc", "sparsity": 1.75}"#),
        ("policy-skip", 1, r#"{"tensor": "*batch_norm*", "skip": false, "codec": "int8"}"#),
        ("policy-min-bytes", 1, r#"{"min_bytes": 65536, "codec": "fp16"}"#),
        ("policy-topk", 1, r#"{"direction": "pull", "codec": "topk", "k": 10}"#),
        ("log", 2, r#"{"filter": "info,tlc_sidecar::sidecar=debug"}"#),
        ("log-bad", 2, r#"{"filter": "info,tlc_daemon=["}"#),
    ]
    .into_iter()
    .map(|(name, endpoint, text)| (name.to_string(), [&[endpoint][..], text.as_bytes()].concat()))
    .collect()
}

/// The README's config examples, some with environment variables after a
/// NUL byte (`NAME=value` lines).
fn config() -> Seeds {
    let policy = r#"[policy]
parameter_jobs = ["ps"]
min_bytes = 4096
warmup_steps = 0
[policy.push]
codec = "3lc"
sparsity = 1.0
[policy.pull]
codec = "3lc"
sparsity = 1.0
[policy.sparse]
codec = "fp16"
[policy.unknown]
codec = "fp16"
[policy.refine]
pull_max_drift = 0.01
pull_max_passes = 8
pull_pass_scale = "max"
push_max_error = 0.5
push_max_passes = 8
[policy.refine.synchronous]
pull_max_drift = 0.01
pull_pass_scale = "max"
push_max_error = inf
[policy.refine.adaptive]
push_max_error = 0.25
push_pass_scale = "toward"
[policy.refine.critical]
push_max_lag = inf
window = 20
change = 0.5
backlog = 4
[[policy.overrides]]
tensor = "*batch_norm*"
skip = true

[contexts]
memory_mib = 4096
idle_seconds = 600
pull_cache = 8
fallback_mib = 512
"#;
    let admin = r#"[admin]
listen = "127.0.0.1:17000"
token_file = "/var/run/secrets/tlc/token"
allowed_hosts = []
[metrics]
listen = "0.0.0.0:17090"
[log]
level = "info"
format = "human"
"#;
    let routes = r#"drain_seconds = 5
[[routes]]
listen = "127.0.0.1:4322"
upstream = "127.0.0.1:2222"
role = "inbound"
[[routes]]
listen = "127.0.0.1:5323"
upstream = "127.0.0.1:4323"
role = "outbound"
[limits]
memory_mib = 256
max_tensor_mib = 64
max_connections = 16
handshake_seconds = 5
idle_seconds = 0
memory_wait_seconds = 10
"#;
    let transparent = "[transparent]\noutbound = \"0.0.0.0:17001\"\ninbound = \"0.0.0.0:17006\"\n";
    let passthrough = "[policy.push]\ncodec = \"none\"\n\n[policy.pull]\ncodec = \"none\"\n";
    let env = "TLC_POLICY__PUSH__SPARSITY=1.75\nTLC_POLICY__PARAMETER_JOBS=ps,chief\n\
               RUST_LOG=debug\nADMIN__ALLOWED_HOSTS=tlc-admin.ml.svc,10.0.0.5\nTLC_THREADS=2";
    [
        ("policy", policy.to_string()),
        ("admin", admin.to_string()),
        ("routes", routes.to_string()),
        ("transparent", transparent.to_string()),
        ("passthrough", passthrough.to_string()),
        ("empty-env", format!("\0{env}")),
        ("transparent-env", format!("{transparent}\0{env}")),
        (
            "env-bad",
            "\0TLC_POLICY__PULL__SPARSITY=2.5\nTLC_POLICY__PULL__COLOUR=red".into(),
        ),
    ]
    .into_iter()
    .map(|(name, text)| (name.to_string(), text.into_bytes()))
    .collect()
}

/// Requests to the admin API as tlcctl and curl send them: method byte,
/// then header values one per line (Host, Origin, Authorization,
/// Content-Type), as the `admin_headers` target reads them.
fn admin_headers() -> Seeds {
    let token = "Bearer 0123456789abcdef0123456789abcdef";
    [
        ("get", 0, format!("127.0.0.1:17000\n\n{token}\n")),
        (
            "post",
            1,
            format!("localhost:17000\n\n{token}\napplication/json"),
        ),
        (
            "patch-origin",
            2,
            format!(
                "[::1]:17000\nhttp://localhost:17000\n{token}\napplication/json; charset=utf-8"
            ),
        ),
        (
            "put-allowed",
            3,
            format!(
                "tlc-admin.ml.svc\nhttps://tlc-admin.ml.svc\nbearer  {token}\nApplication/JSON"
            ),
        ),
        (
            "rebinding",
            1,
            format!("evil.example:17000\nhttp://evil.example:17000\n{token}\ntext/plain"),
        ),
        ("no-token", 0, "127.0.0.1:17000\n\n\n".to_string()),
    ]
    .into_iter()
    .map(|(name, method, text)| (name.to_string(), [&[method][..], text.as_bytes()].concat()))
    .collect()
}

/// The files in `dir` whose names end with `suffix`, by name without it.
fn files(dir: &Path, suffix: &str) -> Result<Vec<(String, Vec<u8>)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = name.strip_suffix(suffix) {
            found.push((stem.to_string(), std::fs::read(&path)?));
        }
    }
    found.sort();
    Ok(found)
}

/// A message with its gRPC prefix.
fn framed(message: &[u8]) -> Result<Vec<u8>> {
    Ok([&grpc::prefix(message.len())?[..], message].concat())
}

/// The lines of a listener hand-over, as tlcd writes them: a manifest of
/// each purpose and both address families, a refusal, a hello, both ready
/// lines.
fn handover_manifest() -> Seeds {
    let entry = |purpose, addr: &str| ManifestEntry {
        purpose,
        addr: addr.parse().expect("an address"),
    };
    let manifest = Manifest {
        listeners: vec![
            entry(Purpose::Route, "127.0.0.1:4322"),
            entry(Purpose::Route, "[::]:5322"),
            entry(Purpose::Admin, "127.0.0.1:17000"),
            entry(Purpose::Metrics, "0.0.0.0:9100"),
        ],
    };
    vec![
        ("manifest".to_string(), manifest.to_line()),
        ("empty".to_string(), Manifest::default().to_line()),
        (
            "refusal".to_string(),
            Manifest::refusal_line("the hello is of hand-over version 2"),
        ),
        ("hello".to_string(), Hello::current().to_line()),
        ("ready".to_string(), Ready::Serving.to_line()),
        (
            "not-ready".to_string(),
            Ready::Failed("cannot read tlcd.toml".into()).to_line(),
        ),
    ]
}

/// Batches of session frames as a session writes them: requests like
/// TensorFlow's, a response whole and one in parts, and the control
/// frames.
fn mux_frames() -> Seeds {
    use tlc_proxy::mux::frame::{Frame, Part, Tables};
    let pairs = |list: &[(&str, &str)]| -> Vec<(bytes::Bytes, bytes::Bytes)> {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec().into(), v.as_bytes().to_vec().into()))
            .collect()
    };
    let request = |replica: &str| {
        Frame::Call(
            1,
            Part {
                head: Some(pairs(&[
                    (":path", "/tensorflow.WorkerService/RecvTensor"),
                    (":authority", "10.0.0.2:2222"),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                    ("tlc-peer", "1"),
                    ("tlc-replica", replica),
                ])),
                data: Some(bytes::Bytes::from_static(b"\x08\x01\x12\x10/job:ps/task:0;1")),
                grpc: true,
                end: true,
                tail: None,
            },
        )
    };
    let response = Frame::Call(
        1,
        Part {
            head: Some(pairs(&[(":status", "200"), ("content-type", "application/grpc")])),
            data: Some(bytes::Bytes::from_static(b"tensor")),
            grpc: true,
            end: true,
            tail: Some(pairs(&[("grpc-status", "0")])),
        },
    );
    let in_parts = [
        Frame::Call(
            2,
            Part {
                head: Some(pairs(&[(":status", "200")])),
                ..Part::default()
            },
        ),
        Frame::Call(
            2,
            Part {
                data: Some(bytes::Bytes::from_static(b"more")),
                ..Part::default()
            },
        ),
        Frame::Call(
            2,
            Part {
                end: true,
                tail: Some(pairs(&[("grpc-status", "0")])),
                ..Part::default()
            },
        ),
    ];
    let write = |frames: &[Frame]| {
        let mut tables = Tables::default();
        let mut out = bytes::BytesMut::new();
        for frame in frames {
            tables.write(frame, &mut out);
        }
        out.to_vec()
    };
    vec![
        ("requests".to_string(), write(&[request("1:1"), request("1:2"), request("1:2")])),
        ("response".to_string(), write(&[response.clone(), response])),
        ("in-parts".to_string(), write(&in_parts)),
        (
            "control".to_string(),
            write(&[Frame::Credit(3, 4 << 20), Frame::Reset(4, 8), Frame::GoAway]),
        ),
    ]
}
