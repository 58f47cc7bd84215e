//! `tlcctl status`: one row per sidecar from `GET /v1/status`.

use anyhow::Result;
use serde_json::Value;

use super::client::{Method, Outcome};
use super::format::{self as fmt, number, NONE};
use super::output;
use super::Ctx;
use crate::table;

/// Runs `status`.
pub fn run(ctx: &Ctx) -> Result<()> {
    let outcomes = ctx.call_all(Method::Get, "/v1/status", None);
    output::show(&outcomes, ctx.format, render)
}

/// The table of the targets that answered.
fn render(outcomes: &[Outcome]) -> String {
    let columns = table::columns(
        &["TARGET", "READY", "PUSH CODEC", "PULL CODEC"],
        &[
            "PUSH RATIO",
            "PULL RATIO",
            "TENSORS",
            "DECODE FAILURES",
            "FALLBACKS",
            "UPTIME",
        ],
    );
    let rows: Vec<Vec<String>> = output::answers(outcomes)
        .map(|(target, status)| row(target, status))
        .collect();
    table::render(&columns, &rows)
}

fn row(target: &str, status: &Value) -> Vec<String> {
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
        fmt::boolean(status, "/ready", "yes", "no").to_string(),
        fmt::codec(status, "/policy/push"),
        fmt::codec(status, "/policy/pull"),
        fmt::ratio(status, "/totals/push"),
        fmt::ratio(status, "/totals/pull"),
        tensors,
        fmt::count(status, "/totals/decode_failures"),
        fmt::count(status, "/totals/fallbacks"),
        fmt::duration_at(status, "/uptime_seconds"),
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
