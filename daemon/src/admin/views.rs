//! The JSON shapes of the admin API's answers.

use serde_json::{json, Value};

use crate::config::layers::Resolved;
use tlc_context::table::TableStats;
use tlc_core::Direction;
use tlc_proxy::{Listener, Target};
use tlc_sidecar::policy::{CodecView, Policy};
use tlc_sidecar::sidecar::stats::{ratio, DirectionStats, Stats};
use tlc_sidecar::sidecar::tensors::TensorRow;
use tlc_sidecar::sidecar::Sidecar;

/// `GET /v1/config`: the configuration and the origin of each value.
pub fn config(resolved: &Resolved) -> Value {
    let sources: serde_json::Map<String, Value> = resolved
        .sources
        .iter()
        .map(|(key, origin)| (key.clone(), Value::String(origin.to_string())))
        .collect();
    json!({"config": resolved.config, "sources": sources})
}

/// The policy in force, as operators read it.
pub fn policy(policy: &Policy) -> Value {
    json!({
        "push": CodecView::from(policy.codec_for(Direction::Push).codec),
        "pull": CodecView::from(policy.codec_for(Direction::Pull).codec),
        "min_bytes": policy.min_bytes(),
        "overrides": policy.overrides(),
    })
}

/// One listener.
pub fn listener(listener: &Listener) -> Value {
    let target = match listener.target {
        Target::Fixed(addr) => addr.to_string(),
        Target::OriginalDestination => "original-destination".into(),
    };
    json!({"listen": listener.listen.to_string(), "role": listener.role, "target": target})
}

/// Size of one context table.
pub fn table(stats: TableStats) -> Value {
    json!({"contexts": stats.contexts, "memory_bytes": stats.memory_bytes})
}

/// The sidecar's running totals.
pub fn totals(stats: &Stats) -> Value {
    let direction = |d: &DirectionStats| {
        let (raw, wire) = (Stats::get(&d.raw_bytes), Stats::get(&d.wire_bytes));
        json!({
            "tensors": Stats::get(&d.compressed),
            "raw_bytes": raw,
            "wire_bytes": wire,
            "ratio": ratio(raw, wire),
        })
    };
    json!({
        "push": direction(&stats.push),
        "pull": direction(&stats.pull),
        "restored": Stats::get(&stats.restored),
        "decode_failures": Stats::get(&stats.decode_failures),
        "fallbacks": Stats::get(&stats.fallbacks),
        "fallbacks_served": Stats::get(&stats.fallbacks_served),
        "passed": stats.passed_by_reason(),
    })
}

/// What the step watch saw: the global step, and the times it went back.
pub fn training(sidecar: &Sidecar) -> Value {
    serde_json::to_value(sidecar.steps.view(std::time::Instant::now())).unwrap_or(Value::Null)
}

/// Fields `/v1/tensors` sorts by.
const SORT_FIELDS: &[&str] = &[
    "tensor",
    "raw_bytes",
    "wire_bytes",
    "ratio",
    "frames",
    "elements",
    "idle_seconds",
];

/// `GET /v1/tensors?sort=FIELD&limit=N`.
pub fn tensors(sidecar: &Sidecar, query: &str) -> Result<Value, String> {
    let mut sort = "wire_bytes";
    let mut limit = usize::MAX;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "sort" => {
                sort = SORT_FIELDS
                    .iter()
                    .find(|f| **f == value)
                    .ok_or_else(|| format!("sort={value}: one of {}", SORT_FIELDS.join(", ")))?;
            }
            "limit" => {
                limit = value
                    .parse()
                    .map_err(|_| format!("limit={value}: a number of rows"))?;
            }
            other => return Err(format!("unknown query parameter '{other}' (sort, limit)")),
        }
    }
    let mut rows = sidecar.tensors();
    sort_rows(&mut rows, sort);
    rows.truncate(limit);
    Ok(json!({ "tensors": rows }))
}

/// Names ascending; numbers descending (the largest first, as in `top`).
fn sort_rows(rows: &mut [TensorRow], field: &str) {
    let key = |r: &TensorRow| -> f64 {
        match field {
            "raw_bytes" => r.raw_bytes as f64,
            "ratio" => r.ratio,
            "frames" => r.frames as f64,
            "elements" => r.elements as f64,
            "idle_seconds" => r.idle_seconds,
            _ => r.wire_bytes as f64,
        }
    };
    if field == "tensor" {
        rows.sort_by(|a, b| a.tensor.cmp(&b.tensor).then(a.direction.cmp(b.direction)));
    } else {
        rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.tensor.cmp(&b.tensor)));
    }
}
