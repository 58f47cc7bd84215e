//! `tlcctl top`: a live view of every sidecar, redrawn every interval.
//!
//! Each refresh polls `/v1/status` and `/v1/tensors` on every target. The
//! rates are the growth of the status totals between two polls over the
//! time between them on this machine's clock, so the first refresh has
//! none yet and a restarted daemon (totals going down) has none for one
//! refresh.

use std::io::{self, IsTerminal, Write};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use tlc_admin_api::{paths, Status, Tensors};

use super::client::{Client, Method, Outcome};
use super::format as fmt;
use super::output::{self, Format};
use super::target::Target;
use super::tensors::{self, SortField, TensorsArgs};
use super::Ctx;
use crate::table;

/// Moves the cursor home and clears the screen.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Arguments of `top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = super::parse_seconds)]
    interval: Duration,
    /// Stop after N refreshes (default: run until interrupted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// Order tensor rows by this field: names ascending, numbers descending.
    #[arg(long, value_enum, value_name = "FIELD", default_value = "wire_bytes")]
    sort: SortField,
    /// Show at most N tensor rows.
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: u64,
}

/// The byte totals of one poll and when it came back.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    /// push raw, push wire, pull raw, pull wire.
    bytes: [f64; 4],
}

/// Bytes per second, raw then wire, per direction.
type Rates = [Option<(f64, f64)>; 2];

/// What one target gave in one refresh.
struct Poll {
    /// The answers as sent (for `-o json`).
    status: Value,
    tensors: Value,
    /// The same answers read, or why they could not be.
    read_status: Result<Status, String>,
    read_tensors: Result<Tensors, String>,
    sample: Option<Sample>,
    /// Since the previous refresh; filled in once both are known.
    rates: Rates,
}

/// One target's part of a refresh.
struct Seen<'a> {
    target: &'a Target,
    poll: Result<Poll, String>,
}

/// Runs `top`.
pub fn run(ctx: &Ctx, args: &TopArgs) -> Result<()> {
    let table_args = TensorsArgs {
        sort: Some(args.sort),
        limit: Some(args.limit),
    };
    let tensors_path = table_args.query().path();
    let clear = ctx.format == Format::Table && io::stdout().is_terminal();
    let mut previous: Vec<Option<Sample>> = vec![None; ctx.targets.len()];
    let mut refresh = 0u64;
    loop {
        refresh += 1;
        let started = Instant::now();
        let polls = ctx.client.each(&ctx.targets, |client, target| {
            poll(client, target, &tensors_path)
        });
        let mut results = Vec::with_capacity(polls.len());
        for ((target, mut poll), before) in ctx.targets.iter().zip(polls).zip(&mut previous) {
            let sample = poll.as_ref().ok().and_then(|p| p.sample);
            if let (Ok(poll), Some(a), Some(b)) = (&mut poll, *before, sample) {
                poll.rates = rates(a, b);
            }
            *before = sample;
            results.push(Seen { target, poll });
        }
        let outcomes = as_outcomes(&results);
        let mut out = io::stdout().lock();
        if ctx.format == Format::Json {
            let line = serde_json::to_string(&output::envelope(&outcomes))?;
            writeln!(out, "{line}")?;
        } else {
            if clear {
                out.write_all(CLEAR.as_bytes())?;
            } else if refresh > 1 {
                writeln!(out)?;
            }
            let title = match args.iterations {
                Some(n) => format!("refresh {refresh}/{n}"),
                None => format!("refresh {refresh}, Ctrl-C to stop"),
            };
            let interval = args.interval.as_secs_f64();
            writeln!(out, "tlcctl top  every {interval}s  {title}\n")?;
            out.write_all(frame(&results, &table_args, ctx.targets.len() > 1).as_bytes())?;
        }
        out.flush()?;
        drop(out);
        if args.iterations.is_some_and(|n| refresh >= n) {
            return output::finish(&outcomes);
        }
        thread::sleep(args.interval.saturating_sub(started.elapsed()));
    }
}

/// Status then tensors from one target.
fn poll(client: &Client, target: &Target, tensors_path: &str) -> Result<Poll, String> {
    let status = client.call(target, Method::Get, paths::STATUS, None)?;
    let at = Instant::now();
    let tensors = client.call(target, Method::Get, tensors_path, None)?;
    let read_status = output::read::<Status>(&status);
    let read_tensors = output::read::<Tensors>(&tensors);
    let sample = read_status.as_ref().ok().map(|status| {
        let (push, pull) = (&status.totals.push, &status.totals.pull);
        Sample {
            at,
            bytes: [
                push.raw_bytes,
                push.wire_bytes,
                pull.raw_bytes,
                pull.wire_bytes,
            ]
            .map(|n| n as f64),
        }
    });
    Ok(Poll {
        status,
        tensors,
        read_status,
        read_tensors,
        sample,
        rates: [None, None],
    })
}

/// The rates between two samples; none where a counter went down.
fn rates(before: Sample, after: Sample) -> Rates {
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let per_second = |i: usize| {
        let grown = after.bytes[i] - before.bytes[i];
        (seconds > 0.0 && grown >= 0.0).then(|| grown / seconds)
    };
    [0, 2].map(|i| Some((per_second(i)?, per_second(i + 1)?)))
}

/// The refresh as JSON answers: status, tensors and rates per target.
fn as_outcomes(results: &[Seen<'_>]) -> Vec<Outcome> {
    results
        .iter()
        .map(|seen| Outcome {
            target: seen.target.clone(),
            answer: seen.poll.as_ref().map_err(Clone::clone).map(|poll| {
                let rates = poll.rates;
                let rate = |r: Option<(f64, f64)>| {
                    r.map(|(raw, wire)| {
                        json!({"raw_bytes_per_second": raw, "wire_bytes_per_second": wire})
                    })
                };
                // The rows as tlcd sent them, whatever their shape.
                let rows = output::read::<Tensors<Value>>(&poll.tensors)
                    .map_or(Value::Null, |t| Value::Array(t.tensors));
                json!({
                    "status": poll.status,
                    "tensors": rows,
                    "rates": {"push": rate(rates[0]), "pull": rate(rates[1])},
                })
            }),
        })
        .collect()
}

/// One screen: a header per target, then every target's tensors.
fn frame(results: &[Seen<'_>], table_args: &TensorsArgs, several: bool) -> String {
    let mut text = String::new();
    let mut tables = Vec::new();
    for seen in results {
        let label = seen.target.label();
        let poll = match &seen.poll {
            Ok(poll) => poll,
            Err(message) => {
                text.push_str(&format!("{}  error: {message}\n", seen.target));
                continue;
            }
        };
        match &poll.read_status {
            Ok(status) => text.push_str(&header(seen.target, status, &poll.rates)),
            Err(why) => text.push_str(&format!("{}\n", output::unreadable(label, why))),
        }
        match &poll.read_tensors {
            Ok(rows) => tables.push((label, Some(rows.clone()))),
            Err(why) => text.push_str(&format!("{}\n", output::unreadable(label, why))),
        }
    }
    if !tables.is_empty() {
        text.push('\n');
        text.push_str(&tensors::render(&tables, table_args, several));
    }
    text
}

/// `HOST:PORT  ready  up 1m21s`, then a small table with a row per
/// direction: codec, totals and rates.
fn header(target: &Target, status: &Status, rates: &Rates) -> String {
    let ready = if status.ready { "ready" } else { "not ready" };
    let uptime = fmt::duration(status.uptime_seconds);
    let directions = [
        ("push", &status.policy.push, &status.totals.push),
        ("pull", &status.policy.pull, &status.totals.pull),
    ];
    let rows: Vec<Vec<String>> = directions
        .iter()
        .zip(rates)
        .map(|((direction, codec, totals), rate)| {
            let (raw_rate, wire_rate) = match rate {
                Some((raw, wire)) => (fmt::rate(*raw), fmt::rate(*wire)),
                None => ("-".to_string(), "-".to_string()),
            };
            vec![
                direction.to_string(),
                fmt::codec(codec),
                fmt::byte_count(totals.raw_bytes),
                fmt::byte_count(totals.wire_bytes),
                fmt::ratio(totals.ratio),
                raw_rate,
                wire_rate,
            ]
        })
        .collect();
    let mut text = format!("{target}  {ready}  up {uptime}\n");
    let columns = table::columns(
        &["", "CODEC"],
        &["RAW", "WIRE", "RATIO", "RAW RATE", "WIRE RATE"],
    );
    for line in table::render(&columns, &rows).lines() {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_between_samples() {
        let at = Instant::now();
        let before = Sample {
            at,
            bytes: [0.0, 0.0, 100.0, 10.0],
        };
        let after = Sample {
            at: at + Duration::from_secs(2),
            bytes: [2048.0, 64.0, 50.0, 10.0],
        };
        let r = rates(before, after);
        assert_eq!(r[0], Some((1024.0, 32.0)));
        assert_eq!(r[1], None, "a counter that went down has no rate");
    }
}
