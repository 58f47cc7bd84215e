//! `tlcctl log-level [FILTER]`: read or replace tlcd's log filter.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::client::Method;
use super::format;
use super::output;
use super::Ctx;
use crate::table;

/// Arguments of `log-level`.
#[derive(Debug, Args)]
pub struct LogLevelArgs {
    /// The new filter, RUST_LOG style: `debug`,
    /// `info,tlc_daemon::sidecar=debug`. Without it, print the current one.
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
}

/// Runs `log-level`.
pub fn run(ctx: &Ctx, args: &LogLevelArgs) -> Result<()> {
    if let Some(filter) = &args.filter {
        let body = json!({ "filter": filter });
        let outcomes = ctx.call_all(Method::Put, "/v1/log-level", Some(&body));
        return output::report_change(&outcomes, ctx.format, |response| {
            format!("filter {}", format::cell(response, "/filter"))
        });
    }
    let outcomes = ctx.call_all(Method::Get, "/v1/log-level", None);
    output::show(&outcomes, ctx.format, |outcomes| {
        let rows: Vec<Vec<String>> = output::answers(outcomes)
            .map(|(target, body)| vec![target.to_string(), format::cell(body, "/filter")])
            .collect();
        table::render(&table::columns(&["TARGET", "FILTER"], &[]), &rows)
    })
}
