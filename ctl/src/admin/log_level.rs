//! `tlcctl log-level [FILTER]`: read or replace tlcd's log filter.

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};

use super::client::Method;
use super::format;
use super::output::{self, Format};
use super::Ctx;
use crate::table::{self, Align};

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
        let outcomes = ctx
            .client
            .call_all(&ctx.targets, Method::Put, "/v1/log-level", Some(&body));
        return output::report_change(&outcomes, ctx.format, |response| {
            format!("filter {}", format::cell(response, "/filter"))
        });
    }
    let outcomes = ctx
        .client
        .call_all(&ctx.targets, Method::Get, "/v1/log-level", None);
    if ctx.format == Format::Json {
        output::print_json(&outcomes)?;
        return output::finish(&outcomes);
    }
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .filter_map(|o| {
            let body: &Value = o.answer.as_ref().ok()?;
            Some(vec![o.target.to_string(), format::cell(body, "/filter")])
        })
        .collect();
    if !rows.is_empty() {
        let columns = [("TARGET", Align::Left), ("FILTER", Align::Left)];
        output::print(&table::render(&columns, &rows))?;
    }
    output::print_failures(&outcomes);
    output::finish(&outcomes)
}
