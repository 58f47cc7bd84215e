//! The metrics endpoint after real `RecvTensor` traffic through a sidecar
//! pair: the exposition is well-formed OpenMetrics text that follows
//! Prometheus' naming conventions, and every number in it agrees with the
//! sidecars' own counters and contexts.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use support::metrics::{get, holder_with, http, key, pair, Exposition, MetricsEndpoint};
use support::teach;
use support::tf::{recv, start_tensor_server, Tensors};
use tlc_core::TensorKey;
use tlc_sidecar::policy::{CodecSettings, PolicySettings};
use tlc_sidecar::sidecar::pass::PassReason;
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const WORKER_TASK: &str = "/job:worker/replica:0/task:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";

/// Gradients of 24 sizes: more tensors than the per-tensor families keep.
const LAYERS: usize = 24;
const PUSH_STEPS: i64 = 3;
const PULL_STEPS: i64 = 6;
const MODEL: usize = 30_000;

fn layer_len(i: usize) -> usize {
    17_000 + 1_000 * i
}

fn values(n: usize, step: i64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32) * 0.37 + step as f32).sin() * 1e-2)
        .collect()
}

fn render(sidecar: &Sidecar) -> Exposition {
    let text = tlc_daemon::metrics::render(sidecar).unwrap();
    match Exposition::parse(&text) {
        Ok(exposition) => exposition,
        Err(err) => panic!("{err}\n{text}"),
    }
}

/// Prometheus' conventions, beyond what the format itself requires.
fn check_conventions(exposition: &Exposition) {
    for family in &exposition.families {
        let name = &family.name;
        // The process' own series keep Prometheus' standard names.
        assert!(
            name.starts_with("tlc_") || name.starts_with("process_"),
            "{name} lacks the tlc_ prefix"
        );
        assert!(family.help.is_some(), "{name} has no HELP");
        for bad in ["_ms", "_milliseconds", "_us", "_kb", "_kib", "_mb", "_mib"] {
            assert!(!name.contains(bad), "{name}: not a base unit");
        }
        for unit in ["bytes", "seconds"] {
            if name.ends_with(&format!("_{unit}")) {
                assert_eq!(family.unit.as_deref(), Some(unit), "{name}: no # UNIT");
            }
        }
        if family.kind == "counter" {
            assert!(
                family.samples.iter().all(|s| s.name.ends_with("_total")),
                "{name}: counter samples end in _total"
            );
        }
        for sample in &family.samples {
            for label in sample.labels.keys() {
                let snake = label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                assert!(snake, "{}: label {label} is not snake_case", sample.name);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposition_matches_the_sidecars_counters() {
    let tensors: Tensors = Arc::new(|key: &str, step: i64| {
        let n = if key.contains("small_bias") {
            10
        } else if key.contains("dense/kernel") {
            MODEL
        } else {
            let layer: usize = key
                .split("layer_")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .and_then(|i| i.parse().ok())
                .unwrap();
            layer_len(layer)
        };
        (vec![n as u64], values(n, step))
    });
    let server = start_tensor_server(tensors).await;
    // Pulls with int8, so that the codec label has two values; the
    // fidelity controller on (it is off by default).
    let mut settings = PolicySettings {
        pull: CodecSettings {
            codec: "int8".into(),
            ..CodecSettings::default()
        },
        ..support::compressing_settings()
    };
    settings.refine.critical.push_max_lag = 0.25;
    let holder = holder_with(&settings);
    let path = pair(server, holder.clone()).await;
    let mut partition = PartitionBuilder::new(PS_TASK).dense_read(
        "dense/kernel",
        "edge_3_dense/kernel/read",
        WORKER_TASK,
    );
    for i in 0..LAYERS {
        let tensor = format!("edge_{}_layer_{i}/grad", 10 + i);
        partition = partition.dense_gradient(&format!("layer_{i}"), &tensor, WORKER_TASK);
    }
    // A bias below min_vector_bytes: passed as small, not as unknown.
    let partition = partition.dense_gradient("small_bias", "edge_4_small_bias", WORKER_TASK);
    teach(&holder, partition);
    for step in 0..PUSH_STEPS {
        for i in 0..LAYERS {
            let node = format!("layer_{i}/grad");
            recv(&path.client, &key(WORKER, PS, 10 + i as u32, &node), step).await;
        }
    }
    for step in 0..PULL_STEPS {
        recv(&path.client, &key(PS, WORKER, 3, "dense/kernel/read"), step).await;
    }
    for step in 0..2 {
        recv(&path.client, &key(WORKER, PS, 4, "small_bias"), step).await;
    }
    holder.stats().config_reloaded(true);
    holder.stats().config_reloaded(true);
    holder.stats().config_reloaded(false);

    let h = render(&holder);
    // TLC_PRINT_METRICS=1 shows both expositions (for docs and debugging).
    if std::env::var_os("TLC_PRINT_METRICS").is_some() {
        eprintln!("{}", tlc_daemon::metrics::render(&holder).unwrap());
        eprintln!("{}", tlc_daemon::metrics::render(&path.requester).unwrap());
    }
    check_conventions(&h);
    let totals = holder.stats().totals();
    let push_raw: usize = (0..LAYERS).map(|i| layer_len(i) * 4).sum::<usize>() * 3;
    let push = [("direction", "push")];
    let pull = [("direction", "pull")];
    // Bytes and frames: the admin API's totals are these series summed,
    // and the known sizes.
    assert_eq!(
        h.sum("tlc_tensor_raw_bytes_total", &push),
        totals.push.raw_bytes as f64
    );
    assert_eq!(h.sum("tlc_tensor_raw_bytes_total", &push), push_raw as f64);
    assert_eq!(
        h.sum("tlc_tensor_wire_bytes_total", &push),
        totals.push.wire_bytes as f64
    );
    assert_eq!(
        h.sum("tlc_tensor_raw_bytes_total", &pull),
        totals.pull.raw_bytes as f64
    );
    assert_eq!(
        h.value(
            "tlc_tensor_raw_bytes_total",
            &[("direction", "pull"), ("codec", "int8")]
        ),
        Some((MODEL * 4 * PULL_STEPS as usize) as f64)
    );
    assert_eq!(
        h.sum("tlc_tensor_wire_bytes_total", &pull),
        totals.pull.wire_bytes as f64
    );
    let push_3lc = [("direction", "push"), ("codec", "3lc")];
    let pull_int8 = [("direction", "pull"), ("codec", "int8")];
    let pushes = (LAYERS as i64 * PUSH_STEPS) as f64;
    assert_eq!(h.value("tlc_frames_total", &push_3lc), Some(pushes));
    assert_eq!(totals.push.tensors as f64, pushes);
    assert_eq!(
        h.value("tlc_frames_total", &pull_int8),
        Some(PULL_STEPS as f64)
    );
    assert_eq!(h.samples("tlc_frames_total", &[]).len(), 2);
    // The fidelity controller: every stream is new, so critical, and each
    // push counted as such; pulls have no controller.
    assert_eq!(h.value("tlc_critical_pushes_total", &[]), Some(pushes));
    assert_eq!(totals.critical_pushes as f64, pushes);
    let critical = h.samples("tlc_tensor_top_critical", &push);
    let top_pushes = h.samples("tlc_tensor_top_raw_bytes_total", &push).len();
    assert_eq!(critical.len(), top_pushes, "one per top push tensor");
    assert!(critical.iter().all(|s| s.value == 1.0), "{critical:?}");
    assert!(h.samples("tlc_tensor_top_critical", &pull).is_empty());
    // The controller does not ask for the workers' agreement here
    // (`agreement = inf`): no series.
    assert!(h.samples("tlc_tensor_top_agreement", &[]).is_empty());
    // One encode timed per tensor sent compressed.
    assert_eq!(h.value("tlc_encode_seconds_count", &push_3lc), Some(pushes));
    assert_eq!(
        h.value("tlc_encode_seconds_count", &pull_int8),
        Some(PULL_STEPS as f64)
    );
    assert!(h.value("tlc_encode_seconds_sum", &push_3lc).unwrap() > 0.0);
    // Calls through the holder's inbound listener, by outcome.
    let calls = |outcome| [("role", "inbound"), ("outcome", outcome)];
    assert_eq!(
        h.value("tlc_recv_tensor_seconds_count", &calls("compressed")),
        Some(pushes + PULL_STEPS as f64)
    );
    assert_eq!(
        h.value("tlc_recv_tensor_seconds_count", &calls("passed")),
        Some(2.0)
    );
    assert_eq!(h.samples("tlc_recv_tensor_seconds_count", &[]).len(), 2);
    // Pass-throughs, fallbacks and reloads.
    assert_eq!(
        h.value("tlc_passthrough_total", &[("reason", "small")]),
        Some(2.0)
    );
    assert_eq!(totals.passed.get("small"), Some(&2));
    assert_eq!(
        h.value("tlc_fallbacks_total", &[("side", "served")]),
        Some(0.0)
    );
    assert_eq!(
        h.value("tlc_fallbacks_total", &[("side", "fetched")]),
        Some(0.0)
    );
    assert_eq!(
        h.value("tlc_config_reloads_total", &[("result", "ok")]),
        Some(2.0)
    );
    assert_eq!(
        h.value("tlc_config_reloads_total", &[("result", "error")]),
        Some(1.0)
    );
    // The policy: 3LC pushes have an s, int8 pulls none.
    assert_eq!(h.value("tlc_sparsity", &push), Some(1.0));
    assert!(h.samples("tlc_sparsity", &pull).is_empty());
    assert_eq!(
        h.value(
            "tlc_policy_codec_info",
            &[("direction", "pull"), ("codec", "int8")]
        ),
        Some(1.0)
    );
    assert_eq!(
        h.value("tlc_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        Some(1.0)
    );
    // The memory total the bounds are shares of: one series, labelled
    // with where it came from (no `limits.memory_mib` here: the cgroup's,
    // or the fallback on a host without one).
    let total = holder.options().memory;
    let limit = h.samples("tlc_memory_limit_bytes", &[]);
    assert_eq!(limit.len(), 1, "{limit:?}");
    assert_eq!(limit[0].labels["source"], total.origin.name());
    assert_ne!(limit[0].labels["source"], "config");
    assert_eq!(limit[0].value, total.bytes as f64);
    let budget = h.value("tlc_in_flight_budget_bytes", &[]).unwrap();
    assert_eq!(budget, (total.bytes / 4).div_ceil(1024) as f64 * 1024.0);
    // Tables and replicas, as the sidecar reports them.
    let sizes = holder.table_sizes();
    for (table, stats) in [
        ("push", sizes.push),
        ("pull", sizes.pull),
        ("replica", sizes.replicas),
    ] {
        let label = [("table", table)];
        assert_eq!(h.value("tlc_contexts", &label), Some(stats.contexts as f64));
        assert_eq!(
            h.value("tlc_context_memory_bytes", &label),
            Some(stats.memory_bytes as f64)
        );
    }
    assert_eq!(
        h.value("tlc_contexts", &[("table", "push")]),
        Some(LAYERS as f64)
    );
    let source = TensorKey {
        holder: PS_TASK.into(),
        requester: String::new(),
        tensor: "dense/kernel/read".into(),
    };
    let (counters, state) = holder
        .inspect_pull_source(&source, |source| (source.counters(), source.state()))
        .unwrap();
    let state = state.unwrap();
    assert_eq!(
        h.value("tlc_keyframes_total", &[("side", "holder")]),
        Some(counters.keyframes as f64)
    );
    assert_eq!(counters.keyframes, 1);
    assert_eq!(
        h.value("tlc_replica_version_max", &[("side", "holder")]),
        Some(state.version as f64)
    );
    assert!(h
        .samples("tlc_replica_version_max", &[("side", "requester")])
        .is_empty());
    // Per tensor: the 20 largest by raw bytes, as their contexts count them.
    let top = h.samples("tlc_tensor_top_raw_bytes_total", &[]);
    let names: BTreeSet<(String, String)> = top
        .iter()
        .map(|s| (s.labels["direction"].clone(), s.labels["tensor"].clone()))
        .collect();
    let mut expected: BTreeSet<(String, String)> = (LAYERS - 19..LAYERS)
        .map(|i| ("push".to_string(), format!("layer_{i}/grad")))
        .collect();
    expected.insert(("pull".into(), "dense/kernel/read".into()));
    assert_eq!(names, expected);
    assert_eq!(top.len(), 20);
    for i in LAYERS - 19..LAYERS {
        let tensor = format!("layer_{i}/grad");
        let key = TensorKey {
            holder: WORKER_TASK.into(),
            requester: PS_TASK.into(),
            tensor: tensor.clone(),
        };
        let counters = holder
            .inspect_push_context(&key, |context| context.counters())
            .unwrap();
        let labels = [("direction", "push"), ("tensor", tensor.as_str())];
        assert_eq!(
            h.value("tlc_tensor_top_raw_bytes_total", &labels),
            Some(counters.raw_bytes as f64)
        );
        assert_eq!(
            h.value("tlc_tensor_top_wire_bytes_total", &labels),
            Some(counters.wire_bytes as f64)
        );
    }
    assert_eq!(
        h.value(
            "tlc_tensor_top_raw_bytes_total",
            &[("direction", "pull"), ("tensor", "dense/kernel/read")]
        ),
        Some(counters.raw_bytes as f64)
    );

    // The requester decoded everything the holder encoded.
    let r = render(&path.requester);
    check_conventions(&r);
    let rtotals = path.requester.stats().totals();
    assert_eq!(r.sum("tlc_restored_total", &[]), rtotals.restored as f64);
    assert_eq!(r.value("tlc_restored_total", &push), Some(pushes));
    assert_eq!(
        r.value("tlc_restored_total", &pull),
        Some(PULL_STEPS as f64)
    );
    assert_eq!(r.sum("tlc_decode_failures_total", &[]), 0.0);
    assert_eq!(rtotals.decode_failures, 0);
    assert_eq!(r.value("tlc_decode_seconds_count", &push_3lc), Some(pushes));
    // The first pull is an int8 keyframe (policy.keyframe_codec), then
    // one int8 delta each (the pull codec): no lossless frame at all.
    assert_eq!(
        r.value(
            "tlc_decode_seconds_count",
            &[("direction", "pull"), ("codec", "none")]
        ),
        None
    );
    assert_eq!(
        r.value("tlc_decode_seconds_count", &pull_int8),
        Some(PULL_STEPS as f64)
    );
    assert_eq!(
        r.value("tlc_keyframes_total", &[("side", "requester")]),
        Some(1.0)
    );
    assert_eq!(
        r.value("tlc_replica_version_max", &[("side", "requester")]),
        Some(state.version as f64)
    );
    let out = |outcome| [("role", "outbound"), ("outcome", outcome)];
    assert_eq!(
        r.value("tlc_recv_tensor_seconds_count", &out("restored")),
        Some(pushes + PULL_STEPS as f64)
    );
    assert_eq!(
        r.value("tlc_recv_tensor_seconds_count", &out("passed")),
        Some(2.0)
    );
    // Only the encoding side counts bytes.
    assert!(r.samples("tlc_tensor_raw_bytes_total", &[]).is_empty());
    assert!(r.samples("tlc_tensor_top_raw_bytes_total", &[]).is_empty());

    // Training stops: each read again of the last value, which has not
    // changed, is answered with the value itself.
    assert_eq!(h.value("tlc_replica_settles_total", &[]), Some(0.0));
    let last = key(PS, WORKER, 3, "dense/kernel/read");
    for _ in 0..2 {
        let read = recv(&path.client, &last, PULL_STEPS - 1).await;
        assert!(read.values == values(MODEL, PULL_STEPS - 1));
    }
    let h = render(&holder);
    assert_eq!(h.value("tlc_replica_settles_total", &[]), Some(2.0));

    // Every family either side renders is in the operator's table.
    let documented = documented_families();
    for family in h.families.iter().chain(&r.families) {
        // OpenMetrics names a counter or info family without the `_total`
        // or `_info` its samples (and the table) carry.
        let named = |suffix: &str| documented.contains(&format!("{}{suffix}", family.name));
        assert!(
            named("") || named("_total") || named("_info"),
            "{} is rendered but missing from docs/OPERATING.md's Metrics table",
            family.name
        );
    }
}

/// The families of the "Metrics" table in docs/OPERATING.md: the one
/// list operators, dashboards and alerts read.
fn documented_families() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/OPERATING.md");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("tlc_") || name.starts_with("process_"))
        .collect()
}

/// Every metric an alert or its tests use is in the table too: on-call
/// reads the table to know what a firing alert measures.
#[test]
fn alerts_use_documented_families() {
    let documented = documented_families();
    for file in ["alerts.yml", "alerts_test.yml"] {
        let path = format!(
            "{}/../grafana/prometheus/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let mut used = 0;
        for (at, _) in text.match_indices("tlc_") {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name == "tlc_" {
                continue; // `tlc_*`, the prefix in a comment
            }
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| documented.contains(*base))
                .unwrap_or(&name);
            assert!(
                documented.contains(family),
                "{file} uses {name}, which docs/OPERATING.md's Metrics table lacks"
            );
            used += 1;
        }
        assert!(used > 5, "{file}: found only {used} tlc_ metrics");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_serves_get_metrics_only() {
    let sidecar = Arc::new(support::compressing_sidecar());
    sidecar
        .stats()
        .passed(&PassReason::Policy(tlc_core::PassReason::Small));
    let endpoint = MetricsEndpoint::start(sidecar).await;
    let addr = endpoint.addr;
    let answers = tokio::task::spawn_blocking(move || {
        (
            get(addr, "/metrics").unwrap(),
            get(addr, "/").unwrap(),
            http(addr, "POST", "/metrics").unwrap(),
        )
    })
    .await
    .unwrap();
    let (metrics, missing, post) = answers;
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let exposition = Exposition::parse(&metrics.body).unwrap();
    check_conventions(&exposition);
    assert_eq!(
        exposition.value("tlc_passthrough_total", &[("reason", "small")]),
        Some(1.0)
    );
    assert_eq!(missing.status, 404);
    assert_eq!(post.status, 405);
    endpoint.stop().await;
}

/// The reader is strict: each of these breaks one rule it checks.
#[test]
fn the_reader_refuses_what_prometheus_would() {
    let good = "# HELP x_seconds Time.\n# TYPE x_seconds histogram\n# UNIT x_seconds seconds\n\
                x_seconds_sum{a=\"b\"} 1.5\nx_seconds_count{a=\"b\"} 3\n\
                x_seconds_bucket{le=\"0.1\",a=\"b\"} 1\nx_seconds_bucket{le=\"+Inf\",a=\"b\"} 3\n\
                # HELP c Things.\n# TYPE c counter\nc_total{k=\"v \\\"q\\\"\"} 2\n# EOF\n";
    let parsed = Exposition::parse(good).unwrap();
    assert_eq!(parsed.value("c_total", &[("k", "v \"q\"")]), Some(2.0));
    let bad = [
        ("no EOF", good.replace("# EOF\n", "")),
        ("no TYPE", good.replace("# TYPE c counter\n", "")),
        ("counter without _total", good.replace("c_total", "c")),
        (
            "buckets not cumulative",
            good.replace("le=\"0.1\",a=\"b\"} 1", "le=\"0.1\",a=\"b\"} 4"),
        ),
        (
            "_count is not the +Inf bucket",
            good.replace("count{a=\"b\"} 3", "count{a=\"b\"} 2"),
        ),
        ("no +Inf bucket", good.replace("le=\"+Inf\"", "le=\"9\"")),
        ("bad metric name", good.replace("c_total{", "c_total-x{")),
        ("bad label value", good.replace("\\\"q\\\"", "\"q\"")),
        (
            "unit not a suffix",
            good.replace("UNIT x_seconds seconds", "UNIT x_seconds bytes"),
        ),
        (
            "a series twice",
            good.replace("# EOF\n", "c_total{k=\"v \\\"q\\\"\"} 3\n# EOF\n"),
        ),
        ("NaN", good.replace("} 1.5", "} NaN")),
        (
            "family twice",
            good.replace("# EOF\n", "# TYPE c counter\n# EOF\n"),
        ),
    ];
    for (what, text) in bad {
        assert!(
            Exposition::parse(&text).is_err(),
            "accepted with {what}:\n{text}"
        );
    }
}

/// Everything written to it, for reading back.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_traced_with_tensor_sizes_and_outcome() {
    let captured = Captured::default();
    let writer = captured.clone();
    // The only test of this binary that installs a subscriber.
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_env_filter("tlc_sidecar::sidecar::calls=debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();
    let tensors: Tensors = Arc::new(|key: &str, step: i64| {
        let n = if key.contains("traced_small") {
            10
        } else {
            20_000
        };
        (vec![n as u64], values(n, step))
    });
    let server = start_tensor_server(tensors).await;
    let path = pair(server, Arc::new(support::compressing_sidecar())).await;
    teach(
        &path.holder,
        PartitionBuilder::new(PS_TASK).dense_gradient("traced", "edge_7_traced/grad", WORKER_TASK),
    );
    recv(&path.client, &key(WORKER, PS, 7, "traced/grad"), 0).await;
    recv(&path.client, &key(WORKER, PS, 8, "traced_small"), 0).await;
    let wire = path.holder.stats().totals().push.wire_bytes;
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let done: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("recv_tensor done"))
        .collect();
    let find = |parts: &[&str]| {
        done.iter()
            .any(|line| parts.iter().all(|part| line.contains(part)))
    };
    let wire = format!("wire_bytes={wire}");
    for role in ["inbound", "outbound"] {
        let role = format!("role=\"{role}\"");
        assert!(
            find(&[
                &role,
                "tensor=\"traced/grad\"",
                if role.contains("inbound") {
                    "class=\"dense_gradient\""
                } else {
                    ""
                },
                "direction=\"push\"",
                "codec=\"3lc\"",
                "raw_bytes=80000",
                &wire,
                "outcome=",
            ]),
            "no traced {role} call of traced/grad in\n{text}"
        );
        assert!(
            find(&[&role, "tensor=\"traced_small\"", "outcome=\"passed\""]),
            "no traced {role} call of traced_small in\n{text}"
        );
    }
    assert!(
        find(&["role=\"inbound\"", "outcome=\"compressed\""]),
        "{text}"
    );
    assert!(
        find(&["role=\"outbound\"", "outcome=\"restored\""]),
        "{text}"
    );
}
