//! A running `tlcd` retuned by `tlcctl` while gradients stream through it:
//! the next frames carry the new sparsity multiplier; a bad value is
//! refused with the daemon's own message and changes nothing; a bad
//! config file on reload (SIGHUP, or the file changing) keeps the running
//! configuration, and a good one takes effect.
//!
//! The test plays the requesting sidecar itself (it announces `tlc-peer`
//! and reads the envelopes), so the frames it checks are exactly what
//! would cross the slow link.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::process::{free_addr, spawn_tlcd, KillOnDrop};
use support::tf::{request_body, start_tensor_server, Tensors};
use support::{register_graph, Client};
use tlc_codec::{Limits, Params};
use tlc_wire::envelope::Envelope;
use tlc_wire::graph::build::PartitionBuilder;
use tlc_wire::tf::{grpc, recv_tensor, RECV_TENSOR_PATH};

const WORKER0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const ELEMENTS: usize = 64 * 1024;

/// A gradient as the worker would send it (the ps asks: a push).
fn gradient_key() -> String {
    format!("{WORKER0};0000000000000001;{PS};edge_12_gradients/dense/MatMul_grad/MatMul_1;0:0")
}

/// `tlcctl`, built by `cargo test --workspace` next to this test's binary.
fn tlcctl() -> PathBuf {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
        .expect("test binary directory");
    let path = dir.join("tlcctl");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "tlc-ctl", "--bin", "tlcctl"])
            .status()
            .expect("cargo build -p tlc-ctl");
        assert!(status.success(), "cannot build tlcctl");
    }
    path
}

/// A `tlcd` process, killed when dropped.
struct Tlcd {
    process: KillOnDrop,
    admin: SocketAddr,
    inbound: SocketAddr,
    /// `XDG_RUNTIME_DIR` of tlcd and tlcctl: tlcd writes its admin token
    /// there and tlcctl finds it, as next to a real tlcd, without leaving
    /// a token file of a killed tlcd in the test machine's /tmp.
    runtime: PathBuf,
}

impl Tlcd {
    fn start(config: &Path, upstream: SocketAddr) -> Tlcd {
        let (admin, inbound) = (free_addr(), free_addr());
        let runtime = config.parent().expect("config directory").to_path_buf();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tlcd"));
        command
            .arg("--config")
            .arg(config)
            .args(["--route", &format!("{inbound}={upstream},inbound")])
            .args(["--admin-listen", &admin.to_string()])
            .args(["--metrics-listen", "off"])
            .env("RUST_LOG", "info")
            .env(support::COMPRESSING_ENV.0, support::COMPRESSING_ENV.1)
            .env("XDG_RUNTIME_DIR", &runtime);
        let tlcd = Tlcd {
            process: spawn_tlcd(&mut command),
            admin,
            inbound,
            runtime,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(admin).is_err() {
            assert!(
                Instant::now() < deadline,
                "tlcd's admin API did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        tlcd
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(tlcctl())
            .args(["--admin", &self.admin.to_string()])
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .env_remove("TLC_ADMIN_TOKEN_FILE")
            .output()
            .expect("run tlcctl")
    }

    fn status(&self) -> serde_json::Value {
        let out = self.ctl(&["status", "-o", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        json["results"][0]["response"].clone()
    }

    fn hangup(&self) {
        // SAFETY: kill(2) with a pid this test started and still owns.
        let rc = unsafe { libc::kill(self.process.0.id() as libc::pid_t, libc::SIGHUP) };
        assert_eq!(rc, 0);
    }
}

/// What crossed the link for one gradient: the sparsity of its frame, or
/// `None` if the sidecar passed it through uncompressed.
async fn pushed_sparsity(client: &Client, step: i64) -> Option<f32> {
    let reply = client
        .call(
            RECV_TENSOR_PATH,
            &[("tlc-peer", "1")],
            request_body(&gradient_key(), step),
        )
        .await;
    assert_eq!(reply.trailers["grpc-status"], "0");
    let message = grpc::parse_single(reply.body, usize::MAX).expect("gRPC message");
    let response = recv_tensor::decode_response(message).expect("RecvTensorResponse");
    if !reply.headers.contains_key("tlc-envelope") {
        let tensor = recv_tensor::classify(&response).expect("a float tensor");
        assert_eq!(tensor.content.len(), 4 * ELEMENTS);
        return None;
    }
    let content = &response.tensor.as_ref().expect("a tensor").tensor_content;
    let limits = Limits {
        max_elements: ELEMENTS as u64,
    };
    let envelope = Envelope::parse(content, &limits).expect("a valid envelope");
    match envelope.frames()[0].header.params {
        Params::ThreeLc { sparsity, .. } => Some(sparsity),
        other => panic!("expected a 3LC frame, got {other:?}"),
    }
}

fn write(path: &Path, text: &str) {
    // Write-then-rename, as editors and ConfigMaps do: the watcher never
    // sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tlcctl_retunes_a_running_tlcd() {
    let tensors: Tensors = Arc::new(|_key, step| {
        let values = (0..ELEMENTS)
            .map(|i| ((i as f32 * 0.618 + step as f32).sin()).powi(3) * 1e-3)
            .collect();
        (vec![256, 256], values)
    });
    let server = start_tensor_server(tensors).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tlcd.toml");
    write(&config, "[policy.push]\ncodec = \"3lc\"\nsparsity = 1.0\n");
    let tlcd = Tlcd::start(&config, server);
    let client = Client::connect(tlcd.inbound).await;
    // The graph passes through tlcd first, as TensorFlow's master sends it;
    // without it the gradient would be of unknown class (no error feedback).
    register_graph(
        &client,
        PartitionBuilder::new("/job:ps/replica:0/task:0").dense_gradient(
            "dense/kernel",
            "edge_12_gradients/dense/MatMul_grad/MatMul_1",
            "/job:worker/replica:0/task:0",
        ),
    )
    .await;

    for step in 0..3 {
        assert_eq!(pushed_sparsity(&client, step).await, Some(1.0));
    }

    // Retune mid-stream: the very next frame uses s = 1.75.
    let out = tlcd.ctl(&["set", "sparsity", "1.75", "--direction", "push"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in 3..6 {
        assert_eq!(pushed_sparsity(&client, step).await, Some(1.75));
    }

    // A bad value: the daemon's message, exit 1, nothing changed.
    let out = tlcd.ctl(&["set", "sparsity", "2.5"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains("sparsity 2.5 is out of range [1.0, 2.0)"),
        "{stderr}"
    );
    assert_eq!(pushed_sparsity(&client, 6).await, Some(1.75));

    // A bad file on SIGHUP: refused, the running configuration stays.
    write(&config, "[policy.push]\nsparsity = 7\n");
    tlcd.hangup();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tlcd.status()["reloads"]["failed"].as_u64() == Some(0) {
        assert!(Instant::now() < deadline, "the bad reload was not reported");
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = tlcd.status();
    assert!(
        status["reloads"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("policy.push.sparsity = 7")),
        "{status}"
    );
    assert_eq!(pushed_sparsity(&client, 7).await, Some(1.75));

    // A good file, noticed without a signal: min_bytes above the tensor's
    // size, so the next gradient passes uncompressed. The API's s = 1.75
    // stays above the file.
    write(
        &config,
        "[policy]\nmin_bytes = 1048576\n[policy.push]\nsparsity = 1.5\n",
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut step = 8;
    while pushed_sparsity(&client, step).await.is_some() {
        assert!(
            Instant::now() < deadline,
            "the changed file was not reloaded"
        );
        step += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = tlcd.ctl(&["config", "get", "policy.push.sparsity", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1.75") && text.contains("api"), "{text}");
}
