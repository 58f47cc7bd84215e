//! `tlcctl`: the operator's command-line tool for tlc.
//!
//! This file only parses the command line, dispatches to a command group and
//! turns an error into one line on stderr (`tlcctl: error: ...`, exit 1).
//! Usage errors are clap's own (exit 2). Admin commands report failures
//! target by target themselves and only ask for exit 1.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod admin;
mod check;
mod codec;
mod inject;
mod kubectl;
mod table;

/// The operator's tool for tlc, the TensorFlow tensor-compressing sidecar.
#[derive(Debug, Parser)]
#[command(name = "tlcctl", version, about, long_about = None)]
struct Cli {
    /// Print a short summary of what was done to stderr.
    #[arg(short, long, global = true)]
    verbose: bool,

    #[command(flatten)]
    admin: admin::AdminOpts,

    #[command(subcommand)]
    command: Command,
}

/// The command groups.
#[derive(Debug, Subcommand)]
enum Command {
    /// Encode, decode, inspect and benchmark tensor codecs offline.
    #[command(subcommand)]
    Codec(codec::CodecCommand),
    /// Add the tlc sidecar and its init step to Kubernetes manifests.
    Inject(inject::InjectArgs),
    /// Take what `inject` added out of Kubernetes manifests again.
    Uninject(inject::UninjectArgs),
    /// Check that a Kubernetes namespace is ready for tlc's sidecars.
    Check(check::CheckArgs),
    /// Print a shell completion script to stdout.
    Completions {
        /// The shell to generate completions for.
        shell: clap_complete::Shell,
    },
    #[command(flatten)]
    Admin(admin::AdminCommand),
}

/// The admin API's options: global, for the admin commands before or
/// after their name, and ignored by these commands, whose help hides them.
const ADMIN_ONLY: [&str; 5] = ["targets", "timeout", "token_file", "selector", "namespace"];
/// The commands that ignore [`ADMIN_ONLY`].
const IGNORE_ADMIN: [&str; 2] = ["inject", "uninject"];

/// The command line as parsed: [`Cli`], with [`ADMIN_ONLY`] hidden in the
/// help of [`IGNORE_ADMIN`] (clap copies global options into every
/// subcommand when it builds them, so only a built command has them;
/// `mut_args` keeps their order, which the built command's lookup needs).
fn command_line() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    for name in IGNORE_ADMIN {
        cmd = cmd.mut_subcommand(name, |sub| {
            sub.mut_args(|arg| {
                let hide = ADMIN_ONLY.contains(&arg.get_id().as_str());
                arg.hide(hide)
            })
        });
    }
    cmd
}

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command_line().get_matches()) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let result = match cli.command {
        Command::Codec(command) => codec::run(command, cli.verbose),
        Command::Inject(args) => inject::run(&args, cli.admin.output_format, cli.verbose),
        Command::Uninject(args) => {
            inject::run_uninject(&args, cli.admin.output_format, cli.verbose)
        }
        Command::Check(args) => check::run(&args),
        Command::Completions { shell } => {
            // Into a buffer first: generate() panics on a failed write,
            // and `tlcctl completions bash | head -1` closes the pipe early,
            // which a write_all error turns into a quiet exit 0 below.
            let mut cmd = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "tlcctl", &mut script);
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(&script)
                .and_then(|()| stdout.flush())
                .map_err(anyhow::Error::from)
        }
        Command::Admin(command) => admin::run(command, cli.admin),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) if err.is::<admin::Failed>() => ExitCode::FAILURE,
        Err(err) => {
            let message = tlc_core::report::one_line(&*err);
            let _ = std::io::stdout().flush();
            eprintln!("tlcctl: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the error is stdout closing early (`tlcctl ... | head`), which is
/// not worth a message.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
