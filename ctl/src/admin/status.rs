//! `tlcctl status`: one row per sidecar from `GET /v1/status`.

use anyhow::Result;
use tlc_admin_api::status::Training;
use tlc_admin_api::{paths, Status};

use super::client::Method;
use super::format::{self as fmt, NONE};
use super::output::{self, Read};
use super::Ctx;
use crate::table;

/// Runs `status`.
pub fn run(ctx: &Ctx) -> Result<()> {
    let outcomes = ctx.call_all(Method::Get, paths::STATUS, None);
    output::show(&outcomes, ctx.format, render)
}

/// The table of the targets that answered, then a line per target about
/// its training run, and a prominent one for each model reset it saw.
fn render(answers: &[Read<'_, Status>]) -> String {
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
    let rows: Vec<Vec<String>> = answers
        .iter()
        .map(|(target, status)| row(target, status.as_ref()))
        .collect();
    let mut text = table::render(&columns, &rows);
    for (target, status) in answers {
        let Some(status) = status else { continue };
        for line in training(target, &status.training)
            .into_iter()
            .chain(reloads(target, status))
            .chain(rows_and_hop(target, status))
        {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

/// What the last reloads of the config file left undone: keys a higher
/// layer overrides (the edit has no effect) and keys waiting for a restart.
fn reloads(target: &str, status: &Status) -> Vec<String> {
    let mut lines = Vec::new();
    let reloads = &status.reloads;
    if !reloads.overridden.is_empty() {
        lines.push(format!(
            "{target}: warning: config file changes without effect, a higher layer sets them: {}",
            reloads.overridden.join(", ")
        ));
    }
    if !reloads.pending_restart.is_empty() {
        lines.push(format!(
            "{target}: config file changes waiting for a restart: {}",
            reloads.pending_restart.join(", ")
        ));
    }
    lines
}

/// What a sidecar saw of the training run: the global step and, after a
/// reset, the line an operator must not miss. Nothing for a sidecar that
/// saw no read of the step.
fn training(target: &str, training: &Training) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(step) = training.global_step {
        let advanced = match training.seconds_since_advanced {
            Some(seconds) => format!("advanced {} ago", fmt::duration(seconds)),
            None => "not advanced yet".to_string(),
        };
        let mut line = format!("{target}: training: global step {step}, {advanced}");
        if training.rewinds >= 1 {
            line.push_str(&format!(", {} checkpoint restore(s)", training.rewinds));
        }
        lines.push(line);
    }
    if let Some(reset) = &training.last_reset {
        let outcome = match reset.action.as_deref() {
            Some("failed") => "job failed by tlcd",
            Some("warned") => "job let go on: recovery.on_model_reset = warn",
            _ => "seen by tlcd",
        };
        lines.push(format!(
            "{target}: MODEL RESET: {} on {} went back from {} to {} at {} ({outcome})",
            reset.counter,
            short_task(&reset.holder),
            reset.from,
            reset.to,
            utc_time(reset.unix_time),
        ));
    }
    lines
}

/// What a sidecar did by row id, on its links and on the hop; nothing
/// where it did nothing.
fn rows_and_hop(target: &str, status: &Status) -> Vec<String> {
    let mut lines = Vec::new();
    let rows = &status.totals.rows;
    let distinct = rows.hits + rows.new;
    if distinct > 0 || status.contexts.rows.contexts > 0 {
        lines.push(format!(
            "{target}: rows: {} held in {} context(s), {} of {} distinct rows sent as deltas ({:.0}%), {} evicted, {} tensor(s) without ids",
            fmt::byte_count(status.contexts.rows.memory_bytes),
            status.contexts.rows.contexts,
            rows.hits,
            distinct,
            100.0 * rows.hits as f64 / distinct.max(1) as f64,
            rows.evictions,
            rows.without_ids,
        ));
    }
    let links = &status.links;
    if !links.rates.is_empty() || links.switched_to_raw + links.switched_to_compressed > 0 {
        let rates: Vec<String> = links
            .rates
            .iter()
            .map(|l| {
                format!(
                    "{} {}",
                    short_task(&l.peer),
                    fmt::link_rate(l.bytes_per_second)
                )
            })
            .collect();
        let rates = if rates.is_empty() {
            "not measured here".to_string()
        } else {
            rates.join(", ")
        };
        lines.push(format!(
            "{target}: links ({}): {rates}; tensors switched to raw {} time(s), back to compressed {}; \
             {} call(s) settled exactly",
            links.mode, links.switched_to_raw, links.switched_to_compressed, links.settled,
        ));
    }
    let hop = &status.totals.hop;
    if hop.sent_raw_bytes + hop.received_raw_bytes > 0 || hop.failures > 0 {
        lines.push(format!(
            "{target}: hop: sent {} as {}, received {} as {}, {} failure(s)",
            fmt::byte_count(hop.sent_raw_bytes),
            fmt::byte_count(hop.sent_wire_bytes),
            fmt::byte_count(hop.received_raw_bytes),
            fmt::byte_count(hop.received_wire_bytes),
            hop.failures,
        ));
    }
    let sessions = &status.totals.sessions;
    if sessions.opened + sessions.served + sessions.refused + sessions.broken > 0 {
        lines.push(format!(
            "{target}: peer sessions: {} opened, {} served, {} refused, {} broken; \
             {} call(s) in sessions, {} on streams of their own",
            sessions.opened,
            sessions.served,
            sessions.refused,
            sessions.broken,
            sessions.calls,
            sessions.calls_on_streams,
        ));
    }
    lines
}

/// `ps/0` for `/job:ps/replica:0/task:0`; other text as it is.
fn short_task(task: &str) -> String {
    let part = |prefix: &str| task.split('/').find_map(|p| p.strip_prefix(prefix));
    match (part("job:"), part("task:")) {
        (Some(job), Some(index)) => format!("{job}/{index}"),
        _ => task.to_string(),
    }
}

/// `12:03:04 UTC` for a Unix time.
fn utc_time(unix: f64) -> String {
    if !unix.is_finite() || unix < 0.0 {
        return NONE.to_string();
    }
    let of_day = (unix as u64) % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// One target's row; `-` in every cell of an answer tlcctl could not read.
fn row(target: &str, status: Option<&Status>) -> Vec<String> {
    let Some(status) = status else {
        let mut row = vec![target.to_string()];
        row.resize(10, NONE.to_string());
        return row;
    };
    let totals = &status.totals;
    vec![
        target.to_string(),
        if status.ready { "yes" } else { "no" }.to_string(),
        fmt::codec(&status.policy.push),
        fmt::codec(&status.policy.pull),
        fmt::ratio(totals.push.ratio),
        fmt::ratio(totals.pull.ratio),
        // Tensors compressed either way; a sidecar that only relays pulls
        // still shows how much it handles.
        (totals.push.tensors + totals.pull.tensors).to_string(),
        totals.decode_failures.to_string(),
        totals.fallbacks.to_string(),
        fmt::duration(status.uptime_seconds),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tlc_admin_api::status::StepEvent;

    /// The example of ADMIN-API.md as tlcd sends it, with a topk pull codec
    /// and two fallbacks.
    fn example() -> Result<Status, String> {
        output::read(&json!({
            "version": "0.1.0", "pid": 4242, "uptime_seconds": 81.5, "ready": true,
            "config_file": null, "listeners": [],
            "policy": {"push": {"codec": "3lc", "sparsity": 1.0}, "pull": {"codec": "topk", "k": 5.0},
                       "min_bytes": 65536, "overrides": 0},
            "totals": {"push": {"tensors": 120, "raw_bytes": 251658240, "wire_bytes": 2893212, "ratio": 86.98},
                       "pull": {"tensors": 120, "raw_bytes": 251658240, "wire_bytes": 4300312, "ratio": 58.52},
                       "restored": 240, "decode_failures": 0, "fallbacks": 2, "fallbacks_served": 0,
                       "passed": {}},
            "training": {"global_step": null, "seconds_since_advanced": null, "advanced_unix_time": null,
                         "resets": 0, "resets_failed": 0, "resets_warned": 0, "rewinds": 0,
                         "last_reset": null, "last_rewind": null, "on_model_reset": "fail"},
            "contexts": {"push": {"contexts": 0, "memory_bytes": 0}, "pull": {"contexts": 0, "memory_bytes": 0},
                         "replicas": {"contexts": 0, "memory_bytes": 0}},
            "log_filter": "info", "log_format": "human",
            "reloads": {"ok": 0, "failed": 0, "last_error": null, "pending_restart": []}
        }))
    }

    #[test]
    fn row_from_the_documented_example() {
        let status = example().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            row("a:1", Some(&status)),
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
        let unreadable = row("a:1", None);
        assert_eq!(unreadable[1..], ["-"; 9]);
    }

    #[test]
    fn training_lines() {
        let mut training = example().unwrap_or_else(|e| panic!("{e}")).training;
        assert!(super::training("a:1", &training).is_empty());
        training.global_step = Some(99);
        training.seconds_since_advanced = Some(2.5);
        let mut status = example().unwrap_or_else(|e| panic!("{e}"));
        assert!(rows_and_hop("a:1", &status).is_empty());
        status.links = tlc_admin_api::status::Links {
            mode: "auto".into(),
            rates: vec![tlc_admin_api::status::LinkRate {
                peer: "/job:ps/replica:0/task:0".into(),
                bytes_per_second: 1.25e6,
            }],
            switched_to_raw: 2,
            switched_to_compressed: 1,
            settled: 3,
        };
        assert_eq!(
            rows_and_hop("a:1", &status),
            [
                "a:1: links (auto): ps/0 10.0 Mbit/s; tensors switched to raw 2 time(s), back to \
              compressed 1; 3 call(s) settled exactly"
            ]
        );
        assert_eq!(
            super::training("a:1", &training),
            ["a:1: training: global step 99, advanced 2s ago"]
        );
        training.global_step = Some(0);
        training.seconds_since_advanced = None;
        training.rewinds = 1;
        training.last_reset = Some(StepEvent {
            holder: "/job:ps/replica:0/task:0".into(),
            counter: "global_step".into(),
            from: 99,
            to: 0,
            unix_time: 1790078584.9,
            action: Some("failed".into()),
        });
        assert_eq!(
            super::training("a:1", &training),
            [
                "a:1: training: global step 0, not advanced yet, 1 checkpoint restore(s)",
                "a:1: MODEL RESET: global_step on ps/0 went back from 99 to 0 at 12:03:04 UTC \
                 (job failed by tlcd)"
            ]
        );
    }
}
