//! Running the user's `kubectl` (`$KUBECTL`, else `kubectl` on the PATH),
//! with the user's context and rights: tlcctl holds no cluster credentials
//! of its own.

use std::process::Command;

use anyhow::{Context, Result};

/// kubectl ran and exited non-zero. Typed so that a caller can tell the
/// API server's refusal ([`Failed::forbidden`]) from anything else.
#[derive(Debug, thiserror::Error)]
#[error("kubectl {args}: {stderr}")]
pub struct Failed {
    /// The arguments it ran with, space-separated.
    pub args: String,
    /// What it said on stderr, trimmed.
    pub stderr: String,
}

impl Failed {
    /// Whether the API server refused the user's rights (RBAC):
    /// kubectl's `Error from server (Forbidden): ...`.
    pub fn forbidden(&self) -> bool {
        self.stderr.contains("(Forbidden)")
    }
}

/// The kubectl to run.
pub fn command() -> Command {
    Command::new(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()))
}

/// Runs `kubectl [-n NAMESPACE] ARGS` and returns its stdout; a failure is
/// a [`Failed`] with kubectl's own message.
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
        return Err(Failed {
            args: all.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        }
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
