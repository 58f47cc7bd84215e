//! `tlcd`: the tlc sidecar daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::sync::Arc;
use tlc_daemon::config::{Config, Role, Route};
use tlc_daemon::policy::Policy;
use tlc_daemon::proxy::Proxy;
use tlc_daemon::sidecar::record::Recorder;
use tlc_daemon::sidecar::Sidecar;
use tracing::info;
use tracing_subscriber::EnvFilter;

/// The tlc sidecar: proxies a TensorFlow task's gRPC traffic and
/// compresses tensors between sidecars.
#[derive(Debug, Parser)]
#[command(name = "tlcd", version, args_conflicts_with_subcommands = true)]
struct Args {
    /// Something other than running the sidecar.
    #[command(subcommand)]
    command: Option<Command>,

    /// TOML configuration file (over the built-in defaults).
    #[arg(long, env = "TLC_CONFIG")]
    config: Option<PathBuf>,

    /// An explicit route, LISTEN=UPSTREAM,ROLE with ROLE outbound or inbound,
    /// e.g. 127.0.0.1:3000=127.0.0.1:4000,outbound (repeatable; added to the
    /// config file's routes).
    #[arg(long = "route", value_name = "LISTEN=UPSTREAM,ROLE")]
    routes: Vec<String>,

    /// Record RecvTensor calls seen on outbound routes into this directory
    /// (request, response, headers and trailers per call), for fixtures and debugging.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,

    /// Most calls to record.
    #[arg(long, default_value_t = 64)]
    record_limit: u64,

    /// Threads serving connections (default: one per CPU). A sidecar shares
    /// the pod's CPUs with TensorFlow; fewer threads mean less contention.
    #[arg(long, env = "TLC_THREADS")]
    threads: Option<usize>,

    /// Log format.
    #[arg(long, value_enum, default_value = "human", env = "TLC_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Train an emulated TensorFlow job through sidecars over limited
    /// links, uncompressed and with 3LC, and compare.
    Demo(tlc_daemon::demo::cli::DemoArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The demo starts dozens of listeners: only warnings unless RUST_LOG says more.
    let default_level = if args.command.is_some() {
        "warn"
    } else {
        "info"
    };
    init_logging(args.log_format, default_level);
    let result = match &args.command {
        Some(Command::Demo(demo)) => tlc_daemon::demo::cli::run(demo),
        None => run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tlcd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    for text in &args.routes {
        config
            .routes
            .push(parse_route(text).with_context(|| format!("--route {text}"))?);
    }
    config.validate()?;
    if config.listeners().is_empty() {
        bail!("nothing to listen on: give --route LISTEN=UPSTREAM,ROLE, or a config file with [[routes]] or [transparent]");
    }
    let recorder = match &args.record {
        Some(dir) => Some(
            Recorder::new(dir, args.record_limit)
                .with_context(|| format!("cannot record into {}", dir.display()))?,
        ),
        None => None,
    };
    let policy = Policy::new(&config.policy)?;
    let sidecar = Arc::new(Sidecar::new(policy, config.contexts.options()?, recorder));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        if threads == 0 {
            bail!("--threads must be at least 1");
        }
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let proxy = Proxy::start(&config, sidecar.clone()).await?;
        // Contexts are bounded by age and memory; check every few seconds.
        let housekeeping = sidecar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tick.tick().await;
                housekeeping.evict();
            }
        });
        wait_for_signal().await?;
        info!("shutting down");
        proxy.shutdown().await;
        info!("sidecar totals {}", sidecar.stats.summary());
        Ok(())
    })
}

fn parse_route(text: &str) -> Result<Route> {
    let (listen, rest) = text
        .split_once('=')
        .context("expected LISTEN=UPSTREAM,ROLE")?;
    let (upstream, role) = rest
        .split_once(',')
        .context("expected LISTEN=UPSTREAM,ROLE")?;
    let role = match role {
        "outbound" => Role::Outbound,
        "inbound" => Role::Inbound,
        other => bail!("role '{other}' is neither outbound nor inbound"),
    };
    Ok(Route {
        listen: listen
            .parse()
            .with_context(|| format!("listen address '{listen}'"))?,
        upstream: upstream
            .parse()
            .with_context(|| format!("upstream address '{upstream}'"))?,
        role,
    })
}

/// Waits for SIGINT or SIGTERM.
async fn wait_for_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("cannot listen for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
