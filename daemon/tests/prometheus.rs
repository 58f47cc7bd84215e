//! A real Prometheus (Debian's `prometheus` package) scrapes a running
//! sidecar's metrics endpoint and sees what the sidecar counted: the
//! exposition is something Prometheus itself accepts, not just what our
//! own reader accepts.
//!
//! Without `/usr/bin/prometheus` the test is skipped, unless `CI` is set:
//! then it fails, since `.ci/run` is meant to install the package.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::metrics::{get, key, pair, MetricsEndpoint};
use support::process::{free_addr, KillOnDrop};
use support::register_graph;
use support::tf::{recv, start_tensor_server, Tensors};
use tlc_wire::graph::build::PartitionBuilder;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const DEADLINE: Duration = Duration::from_secs(30);

/// The Prometheus process, killed when the test ends, passing or not.
struct Running {
    _process: KillOnDrop,
    log: PathBuf,
}

impl Running {
    /// The end of Prometheus' log, for failure messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

fn start_prometheus(dir: &Path, target: SocketAddr, web: SocketAddr) -> Running {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: tlcd\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let log = dir.join("prometheus.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Running {
        _process: KillOnDrop(child),
        log,
    }
}

/// Percent-encodes a PromQL expression for a query string.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant query's first series, if Prometheus answers
/// and has one.
fn query(web: SocketAddr, expression: &str) -> Option<f64> {
    let answer = get(web, &format!("/api/v1/query?query={}", encode(expression))).ok()?;
    if answer.status != 200 {
        return None;
    }
    let json: Value = serde_json::from_str(&answer.body).ok()?;
    if json["status"] != "success" {
        return None;
    }
    json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// The scrape target's state as Prometheus reports it.
fn targets(web: SocketAddr) -> String {
    get(web, "/api/v1/targets")
        .map(|a| a.body)
        .unwrap_or_else(|e| format!("(targets unavailable: {e})"))
}

/// Polls `expression` until it equals `expected` or the deadline passes.
fn wait_for(
    prometheus: &Running,
    web: SocketAddr,
    expression: &str,
    expected: f64,
    until: Instant,
) {
    let mut last = None;
    while Instant::now() < until {
        last = query(web, expression);
        if last == Some(expected) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "Prometheus: {expression} = {last:?}, expected {expected} within {DEADLINE:?}\n\
         targets: {}\nlog:\n{}",
        targets(web),
        prometheus.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_sidecar() {
    if !Path::new(PROMETHEUS).exists() {
        if std::env::var_os("CI").is_some() {
            panic!("{PROMETHEUS} is missing: .ci/run must install Debian's prometheus package");
        }
        eprintln!("skipping: {PROMETHEUS} is not installed (apt-get install prometheus)");
        return;
    }
    // Some gradients through a sidecar pair.
    let tensors: Tensors = Arc::new(|_key: &str, step: i64| {
        let n = 20_000;
        let values = (0..n)
            .map(|i| ((i as f32) * 0.11 + step as f32).cos() * 1e-3)
            .collect();
        (vec![n as u64], values)
    });
    let server = start_tensor_server(tensors).await;
    let path = pair(server, Arc::new(support::compressing_sidecar())).await;
    // The parameter task's graph first, as TensorFlow registers it: the
    // gradients are dense, so they get 3LC with error feedback.
    let mut partition = PartitionBuilder::new("/job:ps/replica:0/task:0");
    for layer in 0..3 {
        let tensor = format!("edge_{}_layer_{layer}/grad", 5 + layer);
        partition = partition.dense_gradient(
            &format!("layer_{layer}"),
            &tensor,
            "/job:worker/replica:0/task:0",
        );
    }
    register_graph(&path.client, partition).await;
    for step in 0..4 {
        for layer in 0..3 {
            let node = format!("layer_{layer}/grad");
            recv(&path.client, &key(WORKER, PS, 5 + layer, &node), step).await;
        }
    }
    let holder = path.holder.clone();
    let push = holder.stats().totals().push;
    let (raw, frames) = (push.raw_bytes as f64, push.tensors as f64);
    assert_eq!(frames, 12.0);
    let memory = holder.options().memory;

    let endpoint = MetricsEndpoint::start(holder.clone()).await;
    let target = endpoint.addr;

    let dir = tempfile::tempdir().unwrap();
    let web = free_addr();
    let dir_path = dir.path().to_path_buf();
    // Blocking HTTP and sleeps: off the runtime, which serves the scrapes.
    tokio::task::spawn_blocking(move || {
        let prometheus = start_prometheus(&dir_path, target, web);
        let until = Instant::now() + DEADLINE;
        wait_for(&prometheus, web, "up{job=\"tlcd\"}", 1.0, until);
        wait_for(
            &prometheus,
            web,
            "sum(tlc_tensor_raw_bytes_total{direction=\"push\"})",
            raw,
            until,
        );
        wait_for(
            &prometheus,
            web,
            "tlc_encode_seconds_count{direction=\"push\",codec=\"3lc\"}",
            frames,
            until,
        );
        wait_for(
            &prometheus,
            web,
            "sum(tlc_class_raw_bytes_total{direction=\"push\",class=\"dense_gradient\"})",
            raw,
            until,
        );
        wait_for(
            &prometheus,
            web,
            &format!(
                "tlc_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            ),
            1.0,
            until,
        );
        // The standard process series, under their own names.
        wait_for(
            &prometheus,
            web,
            "process_resident_memory_bytes{job=\"tlcd\"} > bool 0",
            1.0,
            until,
        );
        wait_for(
            &prometheus,
            web,
            "count({job=\"tlcd\", __name__=~\"process_(cpu_seconds_total|open_fds|max_fds|threads|virtual_memory_bytes|start_time_seconds)\"})",
            6.0,
            until,
        );
        // The memory total, one series, and resident memory against it
        // as the alert divides them (matched on every label but
        // `source`): a share between 0 and 1.
        wait_for(
            &prometheus,
            web,
            &format!(
                "tlc_memory_limit_bytes{{job=\"tlcd\", source=\"{}\"}}",
                memory.origin.name()
            ),
            memory.bytes as f64,
            until,
        );
        wait_for(
            &prometheus,
            web,
            "count(tlc_memory_limit_bytes{job=\"tlcd\"})",
            1.0,
            until,
        );
        wait_for(
            &prometheus,
            web,
            "count(process_resident_memory_bytes{job=\"tlcd\"} / ignoring(source) group_left(source) tlc_memory_limit_bytes{job=\"tlcd\"} > 0 < 1)",
            1.0,
            until,
        );
    })
    .await
    .unwrap();
    drop(dir);
    endpoint.stop().await;
}
