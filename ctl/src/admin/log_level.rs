//! `tlcctl log-level [FILTER]`: read or replace tlcd's log filter.

use anyhow::Result;
use clap::Args;
use tlc_admin_api::{paths, LogLevel, SetLogLevel};

use super::client::Method;
use super::format;
use super::output::{self, Read};
use super::Ctx;
use crate::table;

/// Arguments of `log-level`.
#[derive(Debug, Args)]
pub struct LogLevelArgs {
    /// The new filter, RUST_LOG style: `debug`,
    /// `info,tlc_sidecar::sidecar=debug`. Without it, print the current one.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
}

/// Runs `log-level`.
pub fn run(ctx: &Ctx, args: &LogLevelArgs) -> Result<()> {
    if let Some(filter) = &args.filter {
        let body = serde_json::to_value(SetLogLevel {
            filter: filter.clone(),
        })?;
        let outcomes = ctx.call_all(Method::Put, paths::LOG_LEVEL, Some(&body));
        return output::report_change(&outcomes, ctx.format, |answer: Option<&LogLevel>| {
            format!("filter {}", filter_of(answer))
        });
    }
    let outcomes = ctx.call_all(Method::Get, paths::LOG_LEVEL, None);
    output::show(&outcomes, ctx.format, |answers: &[Read<'_, LogLevel>]| {
        let rows: Vec<Vec<String>> = answers
            .iter()
            .map(|(target, level)| vec![target.to_string(), filter_of(level.as_ref())])
            .collect();
        table::render(&table::columns(&["TARGET", "FILTER"], &[]), &rows)
    })
}

/// The filter a target answered, `-` if its answer could not be read.
fn filter_of(level: Option<&LogLevel>) -> String {
    format::optional(level.map(|l| &l.filter))
}
