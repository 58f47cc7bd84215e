//! The commands that talk to running sidecars through tlcd's admin API
//! (`daemon/ADMIN-API.md`): `status`, `config`, `reload`, `set`,
//! `tensors`, `top`, `log-level`, `version`.
//!
//! Every command runs against every `--admin` target (or every sidecar of
//! the pods `--selector` matches in Kubernetes, see [`kube`]), the way one
//! would look at or change all sidecars of a job at once, and tries all of
//! them before exiting 1 if any failed. Paths, request bodies and answers are
//! `tlc_admin_api`'s types, the ones tlcd serves.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::Value;

mod client;
mod config;
mod format;
mod kube;
mod log_level;
mod output;
mod set;
mod status;
mod target;
mod tensors;
mod token;
mod top;
mod version;

pub use kube::TOKEN_SECRET;
pub use output::Failed;
/// The admin port tlcctl dials by default: tlcd's own default.
pub use target::DEFAULT_PORT;

use client::{Client, Method, Outcome};
pub use output::Format;
use target::Target;

/// Options shared by the admin commands; accepted before or after the
/// command name.
#[derive(Debug, Args)]
pub struct AdminOpts {
    /// A tlcd admin API, HOST:PORT or http://HOST:PORT; repeat it (or
    /// separate with commas) to run against several sidecars.
    #[arg(
        long = "admin",
        value_name = "ADDR",
        global = true,
        env = "TLC_ADMIN",
        value_delimiter = ',',
        default_value = "127.0.0.1:17000",
        value_parser = target::parse,
        help_heading = "Admin API"
    )]
    targets: Vec<Target>,

    /// Output format: admin commands print `table` (the default) or
    /// `json`; `inject` prints `yaml` (the default) or `json`.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FORMAT",
        value_enum,
        global = true
    )]
    pub output_format: Option<Format>,

    /// Give up on a target that has not answered within SECS seconds.
    #[arg(
        long = "timeout",
        value_name = "SECS",
        global = true,
        default_value = "5",
        value_parser = parse_seconds,
        help_heading = "Admin API"
    )]
    timeout: Duration,

    /// File holding the admin token to send (tlcd's admin.token_file).
    /// Default: for a target on this host's loopback, the token tlcd wrote
    /// for itself ($XDG_RUNTIME_DIR/tlcd/admin-PORT.token or
    /// ${TMPDIR:-/tmp}/tlcd-UID/admin-PORT.token), if there is one.
    #[arg(
        long = "token-file",
        value_name = "PATH",
        global = true,
        env = "TLC_ADMIN_TOKEN_FILE",
        help_heading = "Admin API"
    )]
    token_file: Option<PathBuf>,

    /// Every sidecar of the pods matching this Kubernetes label selector
    /// (`training.kubeflow.org/job-name=mnist`), each reached through
    /// `kubectl port-forward` (instead of --admin), with the token of the
    /// namespace's Secret tlc-admin-token unless --token-file is given.
    #[arg(
        short = 'l',
        long = "selector",
        value_name = "SELECTOR",
        global = true,
        help_heading = "Kubernetes"
    )]
    selector: Option<String>,

    /// The namespace of --selector (default: kubectl's current one).
    #[arg(
        long = "namespace",
        value_name = "NS",
        global = true,
        requires = "selector",
        help_heading = "Kubernetes"
    )]
    namespace: Option<String>,
}

/// The admin commands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Show every sidecar's readiness, codecs, compression and failures.
    Status,
    /// Read or change tlcd's effective configuration.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Re-read tlcd's config file now, as SIGHUP does.
    Reload,
    /// Change how tensors are compressed: sparsity, codec, size threshold,
    /// tensors to skip.
    #[command(subcommand)]
    Set(set::SetCommand),
    /// List the tensor contexts every sidecar holds.
    Tensors(tensors::TensorsArgs),
    /// Watch bytes, rates and tensors live, refreshed every few seconds.
    Top(top::TopArgs),
    /// Show or change tlcd's log filter.
    LogLevel(log_level::LogLevelArgs),
    /// Print tlcctl's version and every sidecar's.
    Version(version::VersionArgs),
}

/// What every admin command works with.
pub struct Ctx {
    /// The HTTP client, with the timeout applied.
    pub client: Client,
    /// Every target, each once, in the order given.
    pub targets: Vec<Target>,
    /// `-o`.
    pub format: Format,
}

impl Ctx {
    /// Sends the same request to every target.
    pub fn call_all(&self, method: Method, path: &str, body: Option<&Value>) -> Vec<Outcome> {
        self.client.call_all(&self.targets, method, path, body)
    }
}

/// Runs one admin command. An error that is [`Failed`] has already been
/// reported target by target.
pub fn run(command: AdminCommand, opts: AdminOpts) -> Result<()> {
    let format = match opts.output_format {
        None | Some(Format::Table) => Format::Table,
        Some(Format::Json) => Format::Json,
        Some(Format::Yaml) => {
            anyhow::bail!("-o yaml is for tlcctl inject; admin commands print table or json")
        }
    };
    // `_forwards` lives until the command ends: dropping it stops the
    // port-forwards.
    let (targets, tokens, _forwards) = match &opts.selector {
        Some(selector) => {
            let selection = kube::Selection {
                namespace: opts.namespace.clone(),
                selector: selector.clone(),
            };
            let reached = kube::reach(&selection, opts.token_file.is_none(), opts.timeout)?;
            let tokens = match opts.token_file {
                Some(path) => token::Tokens::File(path),
                None => token::Tokens::Secret(reached.token.clone()),
            };
            (reached.targets.clone(), tokens, Some(reached))
        }
        None => (
            target::dedup(opts.targets),
            opts.token_file
                .map_or(token::Tokens::Default, token::Tokens::File),
            None,
        ),
    };
    let ctx = Ctx {
        client: Client::new(opts.timeout, tokens),
        targets,
        format,
    };
    match command {
        AdminCommand::Status => status::run(&ctx),
        AdminCommand::Config(command) => config::run(&ctx, command),
        AdminCommand::Reload => config::reload(&ctx),
        AdminCommand::Set(command) => set::run(&ctx, command),
        AdminCommand::Tensors(args) => tensors::run(&ctx, &args),
        AdminCommand::Top(args) => top::run(&ctx, &args),
        AdminCommand::LogLevel(args) => log_level::run(&ctx, &args),
        AdminCommand::Version(args) => version::run(&ctx, &args),
    }
}

/// A positive, finite number of seconds (`5`, `0.1`).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("{text:?} is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use tlc_admin_api::env::CLIENT_VARIABLES;

    /// Every variable of tlcctl's command line (`env = "..."`), in every
    /// subcommand.
    fn env_names(command: &clap::Command, out: &mut Vec<String>) {
        for arg in command.get_arguments() {
            if let Some(name) = arg.get_env().and_then(|n| n.to_str()) {
                out.push(name.to_string());
            }
        }
        for sub in command.get_subcommands() {
            env_names(sub, out);
        }
    }

    #[test]
    fn every_variable_tlcctl_reads_is_in_the_shared_list() {
        // tlcd refuses `TLC_` variables it does not know, except these:
        // a variable missing from the list would make a sidecar that has
        // it in its environment refuse to start.
        let mut names = Vec::new();
        env_names(&crate::Cli::command(), &mut names);
        assert!(names.iter().any(|n| n == "TLC_ADMIN"), "{names:?}");
        for name in &names {
            assert!(
                CLIENT_VARIABLES.contains(&name.as_str()),
                "{name} is read by tlcctl but missing from tlc_admin_api::env::CLIENT_VARIABLES"
            );
        }
        // And nothing there that tlcctl no longer reads: tlcd would leave a
        // misspelt setting of that name alone.
        for name in CLIENT_VARIABLES {
            assert!(
                names.iter().any(|n| n == name),
                "{name} is in CLIENT_VARIABLES but tlcctl reads no such variable"
            );
        }
    }
}
