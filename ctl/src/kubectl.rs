//! Running the user's `kubectl` (`$KUBECTL`, else `kubectl` on the PATH),
//! with the user's context and rights: tlcctl holds no cluster credentials
//! of its own.

use std::process::Command;

use anyhow::{bail, Context, Result};

/// The kubectl to run.
pub fn command() -> Command {
    Command::new(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()))
}

/// Runs `kubectl [-n NAMESPACE] ARGS` and returns its stdout; a failure is
/// an error with kubectl's own message.
pub fn output(namespace: Option<&str>, args: &[&str]) -> Result<String> {
    let mut all: Vec<&str> = Vec::with_capacity(args.len() + 2);
    if let Some(ns) = namespace {
        all.extend(["-n", ns]);
    }
    all.extend_from_slice(args);
    let output = command()
        .args(&all)
        .output()
        .context("cannot run kubectl (install it, or set KUBECTL)")?;
    if !output.status.success() {
        bail!(
            "kubectl {}: {}",
            all.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
