//! What the sidecars cost on an unlimited loopback, in one process:
//! `RecvTensor` calls made directly to a stand-in TensorFlow task, and the
//! same calls through a requester sidecar and a holder sidecar, passing
//! through (codec none) and compressing (3LC). Prints latency of small
//! calls, throughput of 16 MiB tensors, and the CPU time the sidecars add
//! per byte (process CPU time through the sidecars minus directly).
//! Then small tensors (64 to 16,384 values): the time and CPU each call
//! costs compressed (3LC, threshold 0) against passed through, and the
//! bytes it puts on the wire: where a lower `min_bytes` still pays.
//!
//! `cargo bench -p tlc-daemon --bench proxy`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::tf::{recv, start_tensor_server, Tensors};
use support::{teach, Client};
use tlc_core::Role;
use tlc_proxy::Proxy;
use tlc_sidecar::policy::{CodecSettings, Policy, PolicySettings};
use tlc_sidecar::sidecar::{Options, Sidecar};
use tlc_wire::graph::build::PartitionBuilder;

const BIG: usize = 4 << 20;
const SMALL_KEY: &str = "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_1_small;0:0";
const BIG_KEY: &str = "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_2_big;0:0";

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass and nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn policy(codec: &str, min_bytes: u64) -> Policy {
    let settings = CodecSettings {
        codec: codec.into(),
        sparsity: (codec == "3lc").then_some(1.0),
        ..CodecSettings::default()
    };
    Policy::new(&PolicySettings {
        push: settings.clone(),
        pull: settings,
        min_bytes,
        min_vector_bytes: min_bytes,
        ..PolicySettings::default()
    })
    .expect("valid policy")
}

/// Sizes of the small tensors measured, in values.
const SMALL_SIZES: [usize; 5] = [64, 256, 1024, 4096, 16384];

fn small_key(n: usize) -> String {
    format!("/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_{n}_small_{n};0:0")
}

async fn through_sidecars(
    server: std::net::SocketAddr,
    codec: &str,
    min_bytes: u64,
) -> (Client, Arc<Sidecar>, Vec<Proxy<Sidecar>>) {
    through_sidecars_with(server, codec, min_bytes, true).await
}

/// [`through_sidecars`], with the sidecars' calls sharing a session or not.
async fn through_sidecars_with(
    server: std::net::SocketAddr,
    codec: &str,
    min_bytes: u64,
    sessions: bool,
) -> (Client, Arc<Sidecar>, Vec<Proxy<Sidecar>>) {
    let holder = Arc::new(Sidecar::new(
        policy(codec, min_bytes),
        Options::default(),
        None,
    ));
    // Every tensor here is a dense gradient, as the graph would say.
    let mut partition = PartitionBuilder::new("/job:ps/replica:0/task:0");
    let worker = "/job:worker/replica:0/task:0";
    for (name, tensor) in [("small", "edge_1_small"), ("big", "edge_2_big")] {
        partition = partition.dense_gradient(name, tensor, worker);
    }
    for n in SMALL_SIZES {
        partition = partition.dense_gradient(
            &format!("small_{n}"),
            &format!("edge_{n}_small_{n}"),
            worker,
        );
    }
    teach(&holder, partition);
    let requester = Arc::new(Sidecar::new(
        policy(codec, min_bytes),
        Options::default(),
        None,
    ));
    let inbound = support::proxy_configured(Role::Inbound, server, holder.clone(), |c| {
        c.peer_sessions = sessions
    })
    .await;
    let outbound =
        support::proxy_configured(Role::Outbound, inbound.local_addrs()[0], requester, |c| {
            c.peer_sessions = sessions
        })
        .await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    (client, holder, vec![outbound, inbound])
}

/// Per call of a small tensor of `n` values: wall µs, process CPU µs.
async fn small_calls(client: &Client, n: usize) -> (f64, f64) {
    let key = small_key(n);
    for step in 0..20 {
        recv(client, &key, step).await;
    }
    let calls = 1000;
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for step in 0..calls {
        recv(client, &key, step).await;
    }
    let per = |x: f64| x * 1e6 / calls as f64;
    (per(t.elapsed().as_secs_f64()), per(cpu_seconds() - cpu))
}

/// Per call of the 256 B tensor, `parallel` calls at a time: wall µs and
/// process CPU µs.
async fn concurrent_calls(client: &Client, parallel: usize) -> (f64, f64) {
    for step in 0..20 {
        recv(client, SMALL_KEY, step).await;
    }
    let rounds = 4000 / parallel;
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for round in 0..rounds {
        let calls = (0..parallel).map(|i| recv(client, SMALL_KEY, (round * parallel + i) as i64));
        futures_util::future::join_all(calls).await;
    }
    let calls = (rounds * parallel) as f64;
    let per = |x: f64| x * 1e6 / calls;
    (per(t.elapsed().as_secs_f64()), per(cpu_seconds() - cpu))
}

struct Measured {
    small_us: f64,
    big_gbps: f64,
    big_cpu: f64,
}

async fn measure(client: &Client) -> Measured {
    for step in 0..20 {
        recv(client, SMALL_KEY, step).await;
    }
    let calls = 2000;
    let t = Instant::now();
    for step in 0..calls {
        recv(client, SMALL_KEY, step).await;
    }
    let small_us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    recv(client, BIG_KEY, 0).await;
    let calls = 40;
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for step in 1..=calls {
        recv(client, BIG_KEY, step).await;
    }
    let seconds = t.elapsed().as_secs_f64().max(1e-9);
    let bytes = (calls as usize * BIG * 4) as f64;
    Measured {
        small_us,
        big_gbps: bytes / seconds / 1e9,
        big_cpu: cpu_seconds() - cpu,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let big: Arc<Vec<f32>> =
            Arc::new((0..BIG).map(|i| (i as f32 * 0.37).sin() * 1e-3).collect());
        let tensors: Tensors = Arc::new(move |key: &str, step: i64| {
            if key.contains("big") {
                (vec![BIG as u64], big.as_ref().clone())
            } else if let Some(n) = SMALL_SIZES.iter().find(|n| key.ends_with(&format!("small_{n};0:0"))) {
                let values = (0..*n)
                    .map(|i| ((i as f32 * 0.61 + step as f32).sin()).powi(3) * 1e-3)
                    .collect();
                (vec![*n as u64], values)
            } else {
                (vec![64], vec![0.5; 64])
            }
        });
        let server = start_tensor_server(tensors).await;
        let direct = measure(&Client::connect(server).await).await;
        println!("16 MiB tensors; small calls are 256 B tensors; one process, 2 runtime threads");
        println!(
            "{:<22} {:>14} {:>12} {:>14} {:>22}",
            "path", "small call µs", "big GB/s", "big CPU s", "sidecar GB/s per core"
        );
        let row = |name: &str, m: &Measured, extra: Option<f64>| {
            let per_core = extra.map_or("-".to_string(), |e| format!("{e:.2}"));
            println!(
                "{name:<22} {:>14.1} {:>12.3} {:>14.3} {:>22}",
                m.small_us, m.big_gbps, m.big_cpu, per_core
            );
        };
        row("direct", &direct, None);
        for codec in ["none", "3lc"] {
            let (client, _, proxies) = through_sidecars(server, codec, 64 * 1024).await;
            let m = measure(&client).await;
            // Bytes the sidecars moved per CPU-second they added (both sidecars together).
            let bytes = 40.0 * (BIG * 4) as f64;
            let extra = (m.big_cpu - direct.big_cpu).max(1e-9);
            row(
                &format!("2 sidecars, {codec}"),
                &m,
                Some(bytes / extra / 1e9),
            );
            for proxy in proxies {
                proxy.shutdown().await;
            }
        }
        println!();
        println!("256 B tensors through 2 sidecars (passed through), their calls in one session or a stream each");
        println!(
            "{:<10} {:>10} {:>14} {:>14}",
            "calls", "at a time", "wall µs/call", "CPU µs/call"
        );
        for sessions in [false, true] {
            let never = tlc_core::bounds::MIN_BYTES.max;
            let (client, _, proxies) = through_sidecars_with(server, "3lc", never, sessions).await;
            let name = if sessions { "session" } else { "streams" };
            for parallel in [1, 32] {
                let (wall, cpu) = concurrent_calls(&client, parallel).await;
                println!("{name:<10} {parallel:>10} {wall:>14.1} {cpu:>14.1}");
            }
            for proxy in proxies {
                proxy.shutdown().await;
            }
        }
        println!();
        println!("small tensors through 2 sidecars, 3LC s=1.0 (dense gradients) vs passed through");
        println!(
            "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10}",
            "values", "raw B", "wire B", "passed µs", "3lc µs", "passed CPU", "3lc CPU", "ratio"
        );
        // The largest threshold the policy takes: every tensor here passes.
        let never = tlc_core::bounds::MIN_BYTES.max;
        let (passing, _, passing_proxies) = through_sidecars(server, "3lc", never).await;
        let (compressing, holder, compressing_proxies) = through_sidecars(server, "3lc", 0).await;
        for n in SMALL_SIZES {
            let (pass_us, pass_cpu) = small_calls(&passing, n).await;
            let before = holder.stats().totals().push;
            let (tlc_us, tlc_cpu) = small_calls(&compressing, n).await;
            let after = holder.stats().totals().push;
            let frames = (after.tensors - before.tensors).max(1) as f64;
            let raw = (after.raw_bytes - before.raw_bytes) as f64 / frames;
            let wire = (after.wire_bytes - before.wire_bytes) as f64 / frames;
            println!(
                "{n:>8} {raw:>10.0} {wire:>12.1} {pass_us:>12.1} {tlc_us:>12.1} {pass_cpu:>12.1} {tlc_cpu:>12.1} {:>9.1}x",
                raw / wire.max(1.0)
            );
        }
        for proxy in passing_proxies.into_iter().chain(compressing_proxies) {
            proxy.shutdown().await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}
