//! Every body of `daemon/ADMIN-API.md` against the types: a realistic
//! value of each type serializes to the JSON the document shows, and the
//! document's JSON parses back to that value. A field renamed, added or
//! dropped on either side fails here.

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Number, Value};
use tlc_admin_api::status::{
    Contexts, DirectionTotals, HopTotals, LinkRate, Links, Listener, Reloads, Role, RowTotals,
    SessionTotals, StepEvent, TableSize, Totals, Training,
};
use tlc_admin_api::{
    CodecView, ConfigPatch, ConfigView, Directions, ErrorBody, LogLevel, PolicyChanged,
    PolicyRequest, PolicyView, Ready, SetLogLevel, Status, TensorRow, Tensors,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The contract as people read it.
const DOC: &str = include_str!("../../daemon/ADMIN-API.md");

/// Every ```json block of the document.
fn blocks() -> Vec<&'static str> {
    DOC.split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .collect()
}

/// The one ```json block of the document that contains `marker`, parsed.
fn block(marker: &str) -> Result<Value> {
    let found: Vec<&str> = blocks()
        .into_iter()
        .filter(|b| b.contains(marker))
        .collect();
    match found.as_slice() {
        [one] => Ok(serde_json::from_str(one)?),
        _ => Err(format!("{} json blocks contain {marker:?}", found.len()).into()),
    }
}

/// `snippet`, which the document shows in its text, parsed.
fn inline(snippet: &str) -> Result<Value> {
    if !DOC.contains(snippet) {
        return Err(format!("ADMIN-API.md does not show `{snippet}`").into());
    }
    Ok(serde_json::from_str(snippet)?)
}

/// `example` is `shown` on the wire, and `shown` reads back as `example`.
fn round_trip<T>(example: &T, shown: &Value) -> Result
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    assert_eq!(&serde_json::to_value(example)?, shown);
    let text = serde_json::to_string(example)?;
    assert_eq!(&serde_json::from_str::<Value>(&text)?, shown);
    assert_eq!(&serde_json::from_value::<T>(shown.clone())?, example);
    Ok(())
}

fn three_lc(sparsity: f64) -> CodecView {
    CodecView {
        codec: "3lc".into(),
        sparsity: Some(sparsity),
        k: None,
    }
}

fn policy() -> PolicyView {
    PolicyView {
        push: three_lc(1.0),
        pull: three_lc(1.0),
        min_bytes: 65536,
        overrides: 0,
    }
}

fn reset() -> StepEvent {
    StepEvent {
        holder: "/job:ps/replica:0/task:0".into(),
        counter: "global_step".into(),
        from: 99,
        to: 0,
        unix_time: 1790000584.2,
        action: Some("failed".into()),
    }
}

fn status_example() -> Status {
    let direction = |wire_bytes, ratio| DirectionTotals {
        tensors: 120,
        raw_bytes: 251658240,
        wire_bytes,
        ratio,
    };
    let table = |contexts, memory_bytes| TableSize {
        contexts,
        memory_bytes,
    };
    Status {
        version: "0.1.0".into(),
        pid: 4242,
        uptime_seconds: 81.5,
        ready: true,
        config_file: Some("/etc/tlc/tlcd.toml".into()),
        listeners: vec![Listener {
            listen: "127.0.0.1:17001".into(),
            role: Role::Outbound,
            target: "original-destination".into(),
        }],
        policy: policy(),
        totals: Totals {
            push: direction(2893212, 86.98),
            pull: direction(4300312, 58.52),
            restored: 240,
            decode_failures: 0,
            fallbacks: 0,
            fallbacks_served: 0,
            passed: BTreeMap::from([("small".to_string(), 480)]),
            rows: RowTotals {
                hits: 5120,
                new: 880,
                evictions: 0,
                without_ids: 0,
            },
            hop: HopTotals {
                sent_raw_bytes: 1843200,
                sent_wire_bytes: 204800,
                received_wire_bytes: 98304,
                received_raw_bytes: 614400,
                failures: 0,
                unshrunk_bytes: 153600,
            },
            sessions: SessionTotals {
                opened: 2,
                refused: 0,
                served: 2,
                broken: 0,
                calls: 1918,
                calls_on_streams: 3,
            },
        },
        training: Training {
            global_step: Some(99),
            seconds_since_advanced: Some(0.4),
            advanced_unix_time: Some(1790000584.2),
            resets: 0,
            resets_failed: 0,
            resets_warned: 0,
            rewinds: 0,
            last_reset: None,
            last_rewind: None,
            on_model_reset: "fail".into(),
            stalls_failed: 0,
        },
        contexts: Contexts {
            push: table(4, 4771840),
            pull: table(2, 2385920),
            replicas: table(0, 0),
            rows: table(1, 786432),
        },
        log_filter: "info".into(),
        log_format: "human".into(),
        reloads: Reloads {
            ok: 1,
            failed: 0,
            last_error: None,
            pending_restart: Vec::new(),
            overridden: Vec::new(),
        },
        links: Links {
            mode: "auto".into(),
            rates: vec![LinkRate {
                peer: "/job:ps/replica:0/task:0".into(),
                bytes_per_second: 1.25e6,
            }],
            switched_to_raw: 0,
            switched_to_compressed: 0,
            settled: 0,
        },
    }
}

#[test]
fn status_and_step_events() -> Result {
    round_trip(&status_example(), &block("\"uptime_seconds\"")?)?;
    round_trip(&reset(), &block("\"unix_time\"")?)
}

#[test]
fn readiness() -> Result {
    round_trip(
        &Ready::from_reasons(Vec::new()),
        &inline(r#"{"ready": true}"#)?,
    )?;
    round_trip(
        &Ready::from_reasons(vec!["...".into()]),
        &inline(r#"{"ready": false, "reasons": ["..."]}"#)?,
    )
}

#[test]
fn configuration() -> Result {
    let view = ConfigView {
        config: json!({"drain_seconds": 30,
                       "policy": {"min_bytes": 65536, "push": {"codec": "3lc", "sparsity": 1.0},
                                  "...": "..."},
                       "...": "..."}),
        sources: BTreeMap::from(
            [
                ("drain_seconds", "default"),
                ("policy.min_bytes", "file /etc/tlc/tlcd.toml"),
                ("policy.push.sparsity", "env TLC_POLICY__PUSH__SPARSITY"),
                ("policy.pull.codec", "flag --pull-codec"),
                ("policy.overrides", "api"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        ),
    };
    round_trip(&view, &block("\"sources\"")?)?;
    let patch: ConfigPatch = BTreeMap::from([
        ("policy.push.sparsity".to_string(), json!(1.75)),
        ("policy.min_bytes".to_string(), json!(131072)),
    ]);
    round_trip(&patch, &block("\"policy.min_bytes\": 131072")?)
}

#[test]
fn policy_changes() -> Result {
    let request = PolicyRequest {
        direction: Some(Directions::Push),
        tensor: Some("*dense*".into()),
        codec: Some("3lc".into()),
        sparsity: Number::from_f64(1.75),
        ..PolicyRequest::default()
    };
    round_trip(&request, &block("\"*dense*\"")?)?;
    // `tlcctl set codec topk --k 5` sends the integer as typed.
    let topk = PolicyRequest {
        codec: Some("topk".into()),
        k: Some(Number::from(5)),
        ..PolicyRequest::default()
    };
    assert_eq!(serde_json::to_string(&topk)?, r#"{"codec":"topk","k":5}"#);
    let typo = serde_json::from_str::<PolicyRequest>(r#"{"sparsty": 1.5}"#);
    assert!(typo.is_err(), "{typo:?}");

    // The answer's policy is the one of /v1/status.
    assert!(DOC.contains(
        r#"`{"changed": ["policy.push.sparsity"], "policy": {...as in /v1/status...}}`"#
    ));
    let changed = PolicyChanged {
        changed: vec!["policy.push.sparsity".into()],
        policy: policy(),
    };
    let shown = json!({"changed": ["policy.push.sparsity"],
                       "policy": block("\"uptime_seconds\"")?["policy"].clone()});
    round_trip(&changed, &shown)
}

#[test]
fn tensors() -> Result {
    let row = TensorRow {
        direction: "push".into(),
        side: "holder".into(),
        tensor: "gradients/dense/MatMul_grad/MatMul_1".into(),
        class: Some("dense_gradient".into()),
        reason: Some("feeds AccumulatorApplyGradient dense/kernel/AccumulatorApplyGradient".into()),
        treatment: Some("error_feedback".into()),
        peer: Some("/job:worker/replica:0/task:1".into()),
        codec: three_lc(1.0),
        elements: 524288,
        frames: 120,
        raw_bytes: 251658240,
        wire_bytes: 2893212,
        ratio: 86.98,
        last_scale: Some(0.0123),
        error_norm: Some(0.731),
        peak_norm: Some(1.25),
        regime: Some("calm".into()),
        critical_pushes: Some(40),
        agreement: Some(0.12),
        replica_version: None,
        idle_seconds: 0.4,
        memory_bytes: 2097152,
        link: Some("compress".into()),
        link_rate: Some(1.25e6),
        break_even_rate: Some(3.1e8),
    };
    let shown = block("\"last_scale\"")?;
    round_trip(&Tensors { tensors: vec![row] }, &shown)?;
    // Rows of any shape pass through as sent.
    let raw: Tensors<Value> = serde_json::from_value(shown.clone())?;
    assert_eq!(serde_json::to_value(&raw)?, shown);
    Ok(())
}

#[test]
fn log_level_and_errors() -> Result {
    round_trip(
        &LogLevel {
            filter: "info".into(),
        },
        &inline(r#"{"filter": "info"}"#)?,
    )?;
    round_trip(
        &SetLogLevel {
            filter: "debug".into(),
        },
        &inline(r#"{"filter": "debug"}"#)?,
    )?;
    round_trip(
        &ErrorBody::new("policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"),
        &inline(
            r#"{"error": "policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"}"#,
        )?,
    )
}

#[test]
fn every_example_is_checked() {
    // status, step event, config, config patch, policy request, tensors.
    assert_eq!(
        blocks().len(),
        6,
        "a new json block in ADMIN-API.md needs a check here"
    );
}
