//! `tlcd`: the tlc sidecar daemon. Wiring only: it reads the configuration,
//! builds the sidecar (`tlc_sidecar`) and starts the proxy (`tlc_proxy`)
//! with it, serves the admin API and the metrics endpoint, and handles
//! signals, reloads and hand-overs.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{CommandFactory, Parser};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tlc_core::Role;
use tlc_daemon::admin::default_token;
use tlc_daemon::admin::guard::Guard;
use tlc_daemon::admin::token::AdminToken;
use tlc_daemon::admin::{self, Admin, Readiness};
use tlc_daemon::config::admin::AdminSettings;
use tlc_daemon::config::layers::{FlagValue, Layers, Resolved};
use tlc_daemon::config::{env_names, log_filter, LogFormat, Route};
use tlc_daemon::control::log::LogControl;
use tlc_daemon::control::{watch, Control};
use tlc_daemon::preflight::{self, StartOptions};
use tlc_proxy::handover::{self, HandoverError, Offer, Offered, Purpose};
use tlc_proxy::http_server;
use tlc_proxy::{self as proxy, Proxy};
use tlc_sidecar::policy::Policy;
use tlc_sidecar::sidecar::record::Recorder;
use tlc_sidecar::sidecar::Sidecar;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
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
    let control = Arc::new(Control::new(layers, resolved, sidecar.clone(), log));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let endpoints = CancellationToken::new();
        let readiness = Arc::new(Readiness::default());
        let handover_path = config.handover_path()?;
        // A successor takes the running tlcd's listening sockets first, so
        // that there is never a moment where nobody listens.
        let mut inherited = match (args.take_over, &handover_path) {
            (false, _) => None,
            (true, None) => {
                bail!("--take-over needs a hand-over socket, but handover_socket = \"off\"")
            }
            (true, Some(path)) => Some(
                handover::take_over(path, TAKE_OVER_TIMEOUT)
                    .await
                    .with_context(|| {
                        format!("--take-over: from the tlcd offering at {}", path.display())
                    })?,
            ),
        };
        let mut inherit = |purpose, addr| inherited.as_mut().and_then(|i| i.take(purpose, addr));
        let mut offered = Vec::new();
        // The operator endpoints first: a sidecar that cannot be watched or
        // retuned should fail at start, not run blind.
        let mut made_token = None;
        if let Some(addr) = config.admin.address()? {
            let listener = proxy::listen(addr, inherit(Purpose::Admin, addr))
                .await
                .with_context(|| format!("admin API: cannot listen on {addr} (admin.listen)"))?;
            // The port actually bound names the token file (`:0` picks one).
            let bound = listener.local_addr().context("admin API: local address")?;
            let (token, made) = admin_token(&config.admin, bound.port())?;
            made_token = made;
            info!(%addr, token_file = %token.path().display(), "admin API listening");
            let guard = Guard::new(token, bound, &config.admin.allowed_hosts);
            let admin = Arc::new(Admin::new(
                control.clone(),
                readiness.clone(),
                config.listeners(),
                guard,
            ));
            offered.push((
                Purpose::Admin,
                proxy::listener_copy(&listener).context("duplicating a listening socket")?,
            ));
            tokio::spawn(http_server::serve(
                listener,
                admin.handler(),
                endpoints.clone(),
            ));
        }
        if let Some(addr) = config.metrics.address("metrics")? {
            let listener = proxy::listen(addr, inherit(Purpose::Metrics, addr))
                .await
                .with_context(|| format!("metrics: cannot listen on {addr} (metrics.listen)"))?;
            let handler = admin::with_probes(
                readiness.clone(),
                tlc_daemon::metrics::handler(sidecar.clone()),
            );
            offered.push((
                Purpose::Metrics,
                proxy::listener_copy(&listener).context("duplicating a listening socket")?,
            ));
            tokio::spawn(http_server::serve(listener, handler, endpoints.clone()));
            info!(%addr, "Prometheus metrics on /metrics, probes on /healthz and /readyz");
        }
        let proxy = Proxy::start_with(&config.proxy_settings()?, sidecar.clone(), |addr| {
            inherit(Purpose::Route, addr)
        })
        .await?;
        for socket in proxy.listening_sockets() {
            offered.push((
                Purpose::Route,
                socket.try_clone().context("a listening socket")?,
            ));
        }
        readiness.set_listening();
        if let Some(inherited) = inherited.take() {
            inherited
                .ready()
                .await
                .context("--take-over: telling the predecessor this tlcd serves")?;
            info!("took the listening sockets over; the predecessor drains its connections");
        }
        let handed_over = CancellationToken::new();
        let offer = handover_path
            .map(|path| tokio::spawn(offer_listeners(path, offered, handed_over.clone())));
        tokio::spawn(watch::watch(
            control.clone(),
            watch::POLL_INTERVAL,
            endpoints.clone(),
        ));
        // Contexts are bounded by age and memory, and a training run that
        // stopped making progress is warned about: check every few seconds.
        let housekeeping = sidecar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tick.tick().await;
                housekeeping.evict();
            }
        });
        tokio::select! {
            signal = wait_for_signal() => {
                signal?;
                info!("shutting down");
                readiness.set_draining();
                // Its copies of the listening sockets go with it: the
                // ports are free at once, and nobody takes them over.
                if let Some(offer) = &offer {
                    offer.abort();
                }
                proxy.drain().await;
            }
            () = handed_over.cancelled() => {
                readiness.set_draining();
                // The successor serves the admin API and metrics now.
                endpoints.cancel();
                proxy.hand_off().await;
            }
        }
        endpoints.cancel();
        if let Some((path, token)) = made_token {
            default_token::remove(&path, &token);
        }
        info!("sidecar totals {}", sidecar.stats().summary());
        Ok(())
    })
}

/// How long `--take-over` waits for the running tlcd to hand its sockets over.
const TAKE_OVER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a running tlcd waits for a successor that took its sockets to
/// say it serves on them.
const SUCCESSOR_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Offers `sockets` at `path` until a successor takes them, then cancels
/// `handed_over`. A successor that fails is logged and the next one waited
/// for; the socket file of a predecessor that has not quite left yet is
/// waited out.
async fn offer_listeners(
    path: PathBuf,
    sockets: Vec<(Purpose, std::net::TcpListener)>,
    handed_over: CancellationToken,
) {
    let mut waited = Duration::ZERO;
    let offer = loop {
        match Offer::bind(&path) {
            Ok(offer) => break offer,
            Err(HandoverError::InUse { .. }) if waited < OFFER_BIND_PATIENCE => {
                tokio::time::sleep(OFFER_BIND_RETRY).await;
                waited += OFFER_BIND_RETRY;
            }
            Err(err) => {
                warn!(error = %err, "no hand-over socket: a restart of this tlcd will break TensorFlow's connections");
                return;
            }
        }
    };
    info!(path = %path.display(), "a successor can take the listening sockets over (tlcd --take-over)");
    let listeners: Vec<Offered<'_>> = sockets
        .iter()
        .map(|(purpose, listener)| Offered {
            purpose: *purpose,
            listener,
        })
        .collect();
    loop {
        match offer.hand_over(&listeners, SUCCESSOR_READY_TIMEOUT).await {
            Ok(successor) => {
                info!(pid = successor.pid, version = %successor.tlcd, listeners = successor.listeners,
                    "a successor took the listening sockets over");
                // Gone before the successor offers its own at the same path.
                drop(offer);
                handed_over.cancel();
                return;
            }
            Err(err) => warn!(error = %err, "a take-over failed; this tlcd serves on"),
        }
    }
}

/// How long a successor waits for its predecessor's hand-over socket to go.
const OFFER_BIND_PATIENCE: Duration = Duration::from_secs(30);
const OFFER_BIND_RETRY: Duration = Duration::from_millis(200);

/// A token file tlcd wrote, and the token in it: removed at shutdown.
type MadeToken = (PathBuf, Vec<u8>);

/// The admin API's token: from `admin.token_file`, or made now and written
/// where tlcctl looks for the API on `port` (then also returned, to be
/// removed at shutdown).
fn admin_token(settings: &AdminSettings, port: u16) -> Result<(AdminToken, Option<MadeToken>)> {
    if let Some(path) = &settings.token_file {
        let token = AdminToken::from_file(path)
            .with_context(|| format!("admin API: admin.token_file = {}", path.display()))?;
        return Ok((token, None));
    }
    let (path, token) = default_token::create(port).context(
        "admin API: no admin.token_file is set and tlcd cannot write its own token; \
         set admin.token_file (--admin-token-file, TLC_ADMIN_TOKEN_FILE) to a file holding one \
         (a Kubernetes Secret), or admin.listen = \"off\"",
    )?;
    Ok((
        AdminToken::generated(&path, token.clone()),
        Some((path, token)),
    ))
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
        upstream: upstream.parse().context("upstream")?,
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
