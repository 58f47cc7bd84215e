//! `tlcd`: the tlc sidecar daemon. Wiring only: it reads the configuration,
//! builds the sidecar (`tlc_sidecar`) and starts the proxy (`tlc_proxy`)
//! with it, serves the admin API and the metrics endpoint, and handles
//! signals, reloads and hand-overs.

#![forbid(unsafe_code)]

mod startup;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use clap::{CommandFactory, Parser};
use serde_json::json;
use startup::Startup;
use tlc_core::Role;
use tlc_daemon::config::layers::{FlagValue, Layers, Resolved};
use tlc_daemon::config::{env_names, log_filter, Config, LogFormat, Route};
use tlc_daemon::control::log::LogControl;
use tlc_daemon::control::Control;
use tlc_daemon::preflight::{self, StartOptions};
use tlc_sidecar::policy::Policy;
use tlc_sidecar::sidecar::record::Recorder;
use tlc_sidecar::sidecar::Sidecar;
use tracing::error;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

/// The tlc sidecar: proxies a TensorFlow task's gRPC traffic and
/// compresses tensors between sidecars.
///
/// Settings come from built-in defaults, then the TOML file (--config),
/// then TLC_* environment variables (TLC_POLICY__PUSH__SPARSITY=1.75),
/// then these flags; `tlcctl config get` shows where each value came from.
#[derive(Debug, Parser)]
#[command(name = "tlcd", version)]
struct Args {
    /// TOML configuration file; reloaded on SIGHUP and when it changes.
    #[arg(long, env = "TLC_CONFIG")]
    config: Option<PathBuf>,

    /// An explicit route, LISTEN=UPSTREAM,ROLE with ROLE outbound or inbound,
    /// e.g. 127.0.0.1:3000=127.0.0.1:4000,outbound (repeatable; added to the
    /// config file's routes).
    #[arg(long = "route", value_name = "LISTEN=UPSTREAM,ROLE")]
    routes: Vec<String>,

    /// Codec for both directions (policy.push.codec, policy.pull.codec).
    #[arg(long, value_name = "NAME")]
    codec: Option<String>,

    /// 3LC sparsity multiplier for both directions, 1 <= s < 2.
    #[arg(long, value_name = "S")]
    sparsity: Option<f64>,

    /// Tensors smaller than this many bytes pass uncompressed (policy.min_bytes).
    #[arg(long, value_name = "BYTES")]
    min_bytes: Option<u64>,

    /// Admin API address (admin.listen), or "off".
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<String>,

    /// File holding the admin API's bearer token (admin.token_file);
    /// re-read when it changes. Default: a token tlcd makes and writes to
    /// $XDG_RUNTIME_DIR/tlcd/admin-PORT.token or ${TMPDIR:-/tmp}/tlcd-UID/admin-PORT.token.
    #[arg(long, value_name = "PATH", env = "TLC_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,

    /// Prometheus metrics address (metrics.listen), or "off".
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,

    /// Log filter (log.level), RUST_LOG syntax, e.g. info,tlc_sidecar=debug.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,

    /// Log format (log.format).
    #[arg(long, value_enum, env = "TLC_LOG_FORMAT")]
    log_format: Option<LogFormat>,

    /// Record RecvTensor calls seen on outbound routes into this directory
    /// (request, response, headers and trailers per call), for fixtures and debugging.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,

    /// Most calls to record.
    #[arg(long, default_value_t = 64)]
    record_limit: u64,

    /// Take the listening sockets over from the tlcd running with the same
    /// configuration (through its hand-over socket, `handover_socket`), which
    /// then closes its connections gracefully: TensorFlow's next calls reach
    /// this one, with no moment where nobody listens. For upgrades and
    /// restarts in place.
    #[arg(long)]
    take_over: bool,

    /// The hand-over socket (handover_socket): auto, off, or an absolute path.
    #[arg(long, value_name = "PATH")]
    handover_socket: Option<String>,

    /// Threads serving connections (default: one per CPU), 1 to 1024. A
    /// sidecar shares the pod's CPUs with TensorFlow; fewer threads mean
    /// less contention.
    #[arg(long, env = "TLC_THREADS")]
    threads: Option<usize>,

    /// Check the configuration (FILE, or --config, with the TLC_*
    /// variables and flags over it) with every check tlcd makes before it
    /// listens (the admin token file and TLS files included), print it, and
    /// exit: 0 if those pass, 1 with the reason if not. Listens on nothing,
    /// so an address that cannot be bound shows only at start.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    check_config: Option<Option<PathBuf>>,
}

fn main() -> ExitCode {
    // Before any thread starts (see the function).
    let arenas_limited = tlc_proxy::limits::memory::limit_arenas();
    let args = Args::parse();
    let asked_format = args.log_format.or_else(env_log_format);
    match run(args, arenas_limited) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let message = tlc_core::report::one_line(&*err);
            let format = LOG_FORMAT.get().copied().or(asked_format);
            if format == Some(LogFormat::Json) {
                fatal_json(&message);
            } else {
                eprintln!("tlcd: error: {message}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The format of the log subscriber once installed.
static LOG_FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// `TLC_LOG__FORMAT`, for an error met before the configuration resolves.
fn env_log_format() -> Option<LogFormat> {
    let text = std::env::var("TLC_LOG__FORMAT").ok()?;
    <LogFormat as clap::ValueEnum>::from_str(&text, true).ok()
}

/// The fatal error as one JSON log line, so that a log pipeline parsing
/// tlcd's JSON does not drop the one line that says why it stopped.
fn fatal_json(message: &str) {
    if LOG_FORMAT.get().is_none() {
        // No subscriber yet (the configuration did not resolve): one for
        // this line.
        let _ = tracing_subscriber::fmt()
            .json()
            .with_writer(std::io::stderr)
            .try_init();
    }
    error!(error = message, "tlcd: cannot run");
}

/// `--check-config`, once the checks start-up makes have passed: the
/// configuration in force, with where each value came from.
fn check_config(resolved: &Resolved) -> Result<()> {
    let config = &resolved.config;
    let shown = toml::to_string(config).context("cannot print the configuration")?;
    println!("{shown}");
    let from: Vec<String> = resolved
        .sources
        .iter()
        .filter(|(_, origin)| **origin != tlc_daemon::config::layers::Origin::Default)
        .map(|(key, origin)| format!("#   {key}: {origin}"))
        .collect();
    if !from.is_empty() {
        println!("# set outside the defaults:\n{}", from.join("\n"));
    }
    let listeners = config.listeners().len();
    println!(
        "# configuration OK: tlcd would start with {listeners} listener(s) \
         (binding the addresses is not tried)"
    );
    Ok(())
}

/// Installs the log subscriber; the returned control changes its filter later.
fn init_logging(filter: &str, format: LogFormat) -> Result<LogControl> {
    let parsed = log_filter::parse(filter).map_err(|e| anyhow!("log filter '{filter}': {e}"))?;
    let (filter_layer, handle) = reload::Layer::new(parsed);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter_layer);
    match format {
        LogFormat::Human => registry.with(fmt).try_init(),
        LogFormat::Json => registry.with(fmt.json()).try_init(),
    }
    .context("cannot install the log subscriber")?;
    let _ = LOG_FORMAT.set(format);
    Ok(LogControl::new(filter, move |new| {
        handle.reload(new).map_err(|e| e.to_string())
    }))
}

/// The flags that set configuration keys, as the flag layer.
fn flag_layer(args: &Args) -> Vec<FlagValue> {
    let mut flags = Vec::new();
    let mut set = |key: &str, value: serde_json::Value, flag: &str| {
        flags.push(FlagValue {
            key: key.into(),
            value,
            flag: flag.into(),
        })
    };
    if let Some(codec) = &args.codec {
        set("policy.push.codec", json!(codec), "--codec");
        set("policy.pull.codec", json!(codec), "--codec");
    }
    if let Some(s) = args.sparsity {
        set("policy.push.sparsity", json!(s), "--sparsity");
        set("policy.pull.sparsity", json!(s), "--sparsity");
    }
    if let Some(n) = args.min_bytes {
        set("policy.min_bytes", json!(n), "--min-bytes");
    }
    if let Some(addr) = &args.admin_listen {
        set("admin.listen", json!(addr), "--admin-listen");
    }
    if let Some(path) = &args.admin_token_file {
        set(
            "admin.token_file",
            json!(path.to_string_lossy()),
            "--admin-token-file",
        );
    }
    if let Some(addr) = &args.metrics_listen {
        set("metrics.listen", json!(addr), "--metrics-listen");
    }
    if let Some(level) = &args.log_level {
        set("log.level", json!(level), "--log-level");
    }
    if let Some(format) = args.log_format {
        set("log.format", json!(format), "--log-format");
    }
    if let Some(path) = &args.handover_socket {
        set("handover_socket", json!(path), "--handover-socket");
    }
    flags
}

/// Every layer of the configuration, resolved; `--route` flags are added
/// to the routes of the layers below.
fn configuration(args: &Args) -> Result<(Layers, Resolved)> {
    let vars = env_names::utf8(std::env::vars_os())?;
    // The variables tlcd's own flags read (TLC_ADMIN_TOKEN_FILE, ...).
    let command = Args::command();
    let flags: Vec<&str> = command
        .get_arguments()
        .filter_map(|arg| arg.get_env()?.to_str())
        .collect();
    env_names::check(vars.iter().map(|(name, _)| name.as_str()), &flags)?;
    let mut layers = Layers {
        file: args.config.clone(),
        env: Layers::env_from(vars),
        flags: flag_layer(args),
        api: Default::default(),
    };
    let mut resolved = layers.resolve()?;
    if !args.routes.is_empty() {
        let mut routes = resolved.config.routes.clone();
        for text in &args.routes {
            routes.push(parse_route(text).with_context(|| format!("--route {text}"))?);
        }
        layers.flags.push(FlagValue {
            key: "routes".into(),
            value: serde_json::to_value(&routes).context("routes")?,
            flag: "--route".into(),
        });
        resolved = layers.resolve()?;
    }
    Ok((layers, resolved))
}

fn run(mut args: Args, arenas_limited: bool) -> Result<()> {
    if let Some(Some(file)) = &args.check_config {
        args.config = Some(file.clone());
    }
    let (layers, resolved) = configuration(&args)?;
    let config = resolved.config.clone();
    // The same checks for --check-config as for start-up: it cannot say
    // "would start" for a reason start-up knows it would not.
    let threads = preflight::check(
        &config,
        &StartOptions {
            threads: args.threads,
            take_over: args.take_over,
        },
    )?;
    if args.check_config.is_some() {
        return check_config(&resolved);
    }
    let log = init_logging(&config.log.level, config.log.format)?;
    let sidecar = sidecar(&config, &args, arenas_limited)?;
    let control = Arc::new(Control::new(layers, resolved, sidecar.clone(), log));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(Startup::new(config, control, sidecar).serve(args.take_over))
}

/// The sidecar `config` describes, recording calls where `--record` asks;
/// its memory bounds are logged.
fn sidecar(config: &Config, args: &Args, arenas_limited: bool) -> Result<Arc<Sidecar>> {
    let recorder = match &args.record {
        Some(dir) => Some(
            Recorder::new(dir, args.record_limit)
                .with_context(|| format!("cannot record into {}", dir.display()))?,
        ),
        None => None,
    };
    let policy = Policy::new(&config.policy)?;
    let options = config.sidecar_options()?;
    let total = match config.limits.memory_mib {
        Some(mib) => format!("{mib} MiB (limits.memory_mib)"),
        None => tlc_proxy::limits::memory::detected().to_string(),
    };
    tracing::info!(
        memory = %total,
        table_mib = options.push_limits.max_bytes >> 20,
        fallback_mib = options.fallback_bytes >> 20,
        in_flight_mib = options.in_flight_bytes >> 20,
        max_tensor_mib = options.max_tensor_bytes >> 20,
        malloc_arenas = if arenas_limited {
            tlc_proxy::limits::memory::MALLOC_ARENAS.to_string()
        } else {
            "the C library's default".to_string()
        },
        "memory bounds"
    );
    let sidecar = Arc::new(Sidecar::new(policy, options, recorder));
    sidecar.set_recovery(config.recovery);
    Ok(sidecar)
}

/// One `--route` flag, `LISTEN=UPSTREAM,ROLE`.
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
        upstream: upstream.parse().context("upstream")?,
        role,
    })
}
