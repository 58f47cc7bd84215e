//! Running the user's `kubectl` (`$KUBECTL`, else `kubectl` on the PATH),
//! with the user's context and rights: tlcctl holds no cluster credentials
//! of its own.

use std::process::Command;

use anyhow::{bail, Context, Result};

/// The kubectl to run.
pub fn command() -> Command {
    Command::new(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()))
}

/// `-n NS`, when a namespace was given.
pub fn namespace_args(namespace: Option<&str>) -> Vec<String> {
    match namespace {
        Some(ns) => vec!["-n".into(), ns.to_string()],
        None => Vec::new(),
    }
}

/// Runs `kubectl ARGS` and returns its stdout; a failure is an error with
/// kubectl's own message.
pub fn output(args: &[String]) -> Result<String> {
    let output = command()
        .args(args)
        .output()
        .context("cannot run kubectl (install it, or set KUBECTL)")?;
    if !output.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
