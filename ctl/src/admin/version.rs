//! `tlcctl version`: this tlcctl's version, and each sidecar's from
//! `GET /v1/status`, so that a mismatch between the two (or between the
//! sidecars of one job) shows before it matters.

use anyhow::Result;
use clap::Args;
use tlc_admin_api::{paths, Status};

use super::client::Method;
use super::output::{self, Read};
use super::Ctx;

/// Arguments of `version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// This tlcctl's version only; no sidecar is asked.
    #[arg(long)]
    client: bool,
}

/// This build's version, as `--version` prints it.
pub const CLIENT: &str = env!("CARGO_PKG_VERSION");

/// Runs `version`.
pub fn run(ctx: &Ctx, args: &VersionArgs) -> Result<()> {
    println!("tlcctl {CLIENT}");
    if args.client {
        return Ok(());
    }
    let outcomes = ctx.call_all(Method::Get, paths::STATUS, None);
    output::show(&outcomes, ctx.format, render)
}

/// One line per sidecar that answered: `TARGET: tlcd VERSION`.
fn render(answers: &[Read<'_, Status>]) -> String {
    let mut text = String::new();
    for (target, status) in answers {
        let version = status.as_ref().map_or("-", |s| s.version.as_str());
        let note = if version != CLIENT && version != "-" {
            " (not this tlcctl's version)"
        } else {
            ""
        };
        text.push_str(&format!("{target}: tlcd {version}{note}\n"));
    }
    text
}
