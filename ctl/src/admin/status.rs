//! `tlcctl status`: one row per sidecar from `GET /v1/status`.

use anyhow::Result;
use serde_json::Value;

use super::client::{Method, Outcome};
use super::format::{self as fmt, number, NONE};
use super::output::{self, Format};
use super::Ctx;
use crate::table::{self, Align};

const COLUMNS: [(&str, Align); 10] = [
    ("TARGET", Align::Left),
    ("READY", Align::Left),
    ("PUSH CODEC", Align::Left),
    ("PULL CODEC", Align::Left),
    ("PUSH RATIO", Align::Right),
    ("PULL RATIO", Align::Right),
    ("TENSORS", Align::Right),
    ("DECODE FAILURES", Align::Right),
    ("FALLBACKS", Align::Right),
    ("UPTIME", Align::Right),
];

/// Runs `status`.
pub fn run(ctx: &Ctx) -> Result<()> {
    let outcomes = ctx
        .client
        .call_all(&ctx.targets, Method::Get, "/v1/status", None);
    if ctx.format == Format::Json {
        output::print_json(&outcomes)?;
        return output::finish(&outcomes);
    }
    output::print(&render(&outcomes))?;
    output::print_failures(&outcomes);
    output::finish(&outcomes)
}

/// The table of the targets that answered.
fn render(outcomes: &[Outcome]) -> String {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .filter_map(|o| o.answer.as_ref().ok().map(|s| row(o.target.label(), s)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    table::render(&COLUMNS, &rows)
}

fn row(target: &str, status: &Value) -> Vec<String> {
    let ready = match status.get("ready").and_then(Value::as_bool) {
        Some(true) => "yes",
        Some(false) => "no",
        None => NONE,
    };
    // Tensors compressed either way; a sidecar that only relays pulls
    // still shows how much it handles.
    let tensors = match (
        number(status, "/totals/push/tensors"),
        number(status, "/totals/pull/tensors"),
    ) {
        (None, None) => NONE.to_string(),
        (push, pull) => format!("{}", push.unwrap_or(0.0) + pull.unwrap_or(0.0)),
    };
    vec![
        target.to_string(),
        ready.to_string(),
        fmt::codec(status, "/policy/push"),
        fmt::codec(status, "/policy/pull"),
        fmt::ratio(status, "/totals/push"),
        fmt::ratio(status, "/totals/pull"),
        tensors,
        fmt::count(status, "/totals/decode_failures"),
        fmt::count(status, "/totals/fallbacks"),
        number(status, "/uptime_seconds").map_or_else(|| NONE.to_string(), fmt::duration),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn row_from_the_documented_example() {
        let status = json!({
            "uptime_seconds": 81.5, "ready": true,
            "policy": {"push": {"codec": "3lc", "sparsity": 1.0}, "pull": {"codec": "topk", "k": 5}},
            "totals": {"push": {"tensors": 120, "raw_bytes": 251658240, "wire_bytes": 2893212, "ratio": 86.98},
                       "pull": {"tensors": 120, "raw_bytes": 251658240, "wire_bytes": 4300312, "ratio": 58.52},
                       "decode_failures": 0, "fallbacks": 2}
        });
        assert_eq!(
            row("a:1", &status),
            [
                "a:1",
                "yes",
                "3lc s=1.00",
                "topk k=5",
                "87.0x",
                "58.5x",
                "240",
                "0",
                "2",
                "1m21s"
            ]
        );
        let empty = row("a:1", &json!({}));
        assert_eq!(empty[1..], ["-"; 9]);
    }
}
