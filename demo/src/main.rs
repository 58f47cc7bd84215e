//! `tlc-demo`: trains an emulated TensorFlow job through tlc sidecars over
//! rate-limited links, uncompressed and with 3LC, and compares the runs.
//! Everything is in the library ([`tlc_demo::cli`]); this is its command.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Train an emulated TensorFlow parameter-server job through sidecars over
/// limited links, uncompressed and with 3LC, and compare.
#[derive(Debug, Parser)]
#[command(name = "tlc-demo", version)]
struct Args {
    #[command(flatten)]
    demo: tlc_demo::cli::DemoArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The demo starts dozens of listeners: only warnings unless RUST_LOG says more.
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let filter = match EnvFilter::try_new(&filter) {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("tlc-demo: error: RUST_LOG '{filter}': {err}");
            return ExitCode::FAILURE;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match tlc_demo::cli::run(&args.demo) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tlc-demo: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
