//! The binary's start-up once the configuration is resolved (a module of
//! `main.rs`, not of the library): what tlcd listens on, in order, what it
//! offers a successor, and how it stops. Each step is a method of
//! [`Startup`]; [`Startup::serve`] lists them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tlc_daemon::admin::default_token;
use tlc_daemon::admin::guard::Guard;
use tlc_daemon::admin::token::AdminToken;
use tlc_daemon::admin::{self, Admin, Readiness};
use tlc_daemon::config::admin::AdminSettings;
use tlc_daemon::config::Config;
use tlc_daemon::control::{watch, Control};
use tlc_proxy::handover::{self, HandoverError, Inherited, Offer, Offered, Purpose};
use tlc_proxy::http_server;
use tlc_proxy::{self as proxy, Proxy};
use tlc_sidecar::sidecar::Sidecar;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A tlcd on its way to serving: the parts built from the configuration,
/// and what each listening step adds.
pub struct Startup {
    config: Config,
    control: Arc<Control>,
    sidecar: Arc<Sidecar>,
    readiness: Arc<Readiness>,
    /// Cancelled when the admin API and the metrics endpoint stop.
    endpoints: CancellationToken,
    /// The running tlcd's listening sockets, when taking over from it.
    inherited: Option<Inherited>,
    /// Copies of every listening socket, for a successor.
    offered: Vec<(Purpose, std::net::TcpListener)>,
    /// The admin token file tlcd wrote itself, removed at shutdown.
    made_token: Option<MadeToken>,
}

impl Startup {
    /// A start-up of `sidecar`, run by `control`, as `config` says.
    pub fn new(config: Config, control: Arc<Control>, sidecar: Arc<Sidecar>) -> Startup {
        Startup {
            config,
            control,
            sidecar,
            readiness: Arc::new(Readiness::default()),
            endpoints: CancellationToken::new(),
            inherited: None,
            offered: Vec::new(),
            made_token: None,
        }
    }

    /// Listens, serves until a signal or a successor ends it, and stops.
    /// The operator endpoints come first: a sidecar that cannot be watched
    /// or retuned should fail at start, not run blind.
    pub async fn serve(mut self, take_over: bool) -> Result<()> {
        let handover_path = self.config.handover_path()?;
        self.take_over(take_over, handover_path.as_ref()).await?;
        self.admin_api().await?;
        self.metrics().await?;
        let proxy = self.proxy().await?;
        self.readiness.set_listening();
        if let Some(inherited) = self.inherited.take() {
            inherited
                .ready()
                .await
                .context("--take-over: telling the predecessor this tlcd serves")?;
            info!("took the listening sockets over; the predecessor drains its connections");
        }
        let handed_over = CancellationToken::new();
        let offered = std::mem::take(&mut self.offered);
        let offer = handover_path
            .map(|path| tokio::spawn(offer_listeners(path, offered, handed_over.clone())));
        self.housekeeping();
        tokio::select! {
            signal = wait_for_signal() => {
                signal?;
                info!("shutting down");
                self.readiness.set_draining();
                // Its copies of the listening sockets go with it: the
                // ports are free at once, and nobody takes them over.
                if let Some(offer) = &offer {
                    offer.abort();
                }
                proxy.drain().await;
            }
            () = handed_over.cancelled() => {
                self.readiness.set_draining();
                // The successor serves the admin API and metrics now.
                self.endpoints.cancel();
                proxy.hand_off().await;
            }
        }
        self.endpoints.cancel();
        if let Some((path, token)) = self.made_token {
            default_token::remove(&path, &token);
        }
        info!("sidecar totals {}", self.sidecar.stats().summary());
        Ok(())
    }

    /// With `--take-over`, the running tlcd's listening sockets, taken
    /// first, so that there is never a moment where nobody listens.
    async fn take_over(&mut self, take_over: bool, path: Option<&PathBuf>) -> Result<()> {
        self.inherited = match (take_over, path) {
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
        Ok(())
    }

    /// The inherited socket for `purpose` at `addr`, if any.
    fn inherit(
        &mut self,
        purpose: Purpose,
        addr: std::net::SocketAddr,
    ) -> Option<std::net::TcpListener> {
        self.inherited.as_mut().and_then(|i| i.take(purpose, addr))
    }

    /// Keeps a copy of `listener` for a successor.
    fn offer(&mut self, purpose: Purpose, listener: &tokio::net::TcpListener) -> Result<()> {
        let copy = proxy::listener_copy(listener).context("duplicating a listening socket")?;
        self.offered.push((purpose, copy));
        Ok(())
    }

    /// The admin API, where `admin.listen` is set.
    async fn admin_api(&mut self) -> Result<()> {
        let Some(addr) = self.config.admin.address()? else {
            return Ok(());
        };
        let inherited = self.inherit(Purpose::Admin, addr);
        let listener = proxy::listen(addr, inherited)
            .await
            .with_context(|| format!("admin API: cannot listen on {addr} (admin.listen)"))?;
        // The port actually bound names the token file (`:0` picks one).
        let bound = listener.local_addr().context("admin API: local address")?;
        let (token, made) = admin_token(&self.config.admin, bound.port())?;
        self.made_token = made;
        info!(%addr, token_file = %token.path().display(), "admin API listening");
        let guard = Guard::new(token, bound, &self.config.admin.allowed_hosts);
        let admin = Arc::new(Admin::new(
            self.control.clone(),
            self.readiness.clone(),
            self.config.listeners(),
            guard,
        ));
        self.offer(Purpose::Admin, &listener)?;
        let endpoints = self.endpoints.clone();
        tokio::spawn(http_server::serve(listener, admin.handler(), endpoints));
        Ok(())
    }

    /// The Prometheus endpoint and the probes, where `metrics.listen` is set.
    async fn metrics(&mut self) -> Result<()> {
        let Some(addr) = self.config.metrics.address("metrics")? else {
            return Ok(());
        };
        let inherited = self.inherit(Purpose::Metrics, addr);
        let listener = proxy::listen(addr, inherited)
            .await
            .with_context(|| format!("metrics: cannot listen on {addr} (metrics.listen)"))?;
        let handler = admin::with_probes(
            self.readiness.clone(),
            tlc_daemon::metrics::handler(self.sidecar.clone()),
        );
        self.offer(Purpose::Metrics, &listener)?;
        tokio::spawn(http_server::serve(
            listener,
            handler,
            self.endpoints.clone(),
        ));
        info!(%addr, "Prometheus metrics on /metrics, probes on /healthz and /readyz");
        Ok(())
    }

    /// The proxy on every route, with the sidecar as its handler.
    async fn proxy(&mut self) -> Result<Proxy<Sidecar>> {
        let settings = self.config.proxy_settings()?;
        let mut inherited = self.inherited.take();
        let proxy = Proxy::start_with(&settings, self.sidecar.clone(), |addr| {
            inherited
                .as_mut()
                .and_then(|i| i.take(Purpose::Route, addr))
        })
        .await;
        self.inherited = inherited;
        let proxy = proxy?;
        for socket in proxy.listening_sockets() {
            let copy = socket.try_clone().context("a listening socket")?;
            self.offered.push((Purpose::Route, copy));
        }
        Ok(proxy)
    }

    /// What runs beside the calls: the configuration file watched for
    /// changes, and every few seconds contexts bounded by age and memory
    /// and a training run that stopped making progress warned about.
    fn housekeeping(&self) {
        tokio::spawn(watch::watch(
            self.control.clone(),
            watch::POLL_INTERVAL,
            self.endpoints.clone(),
        ));
        let sidecar = self.sidecar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                sidecar.evict();
            }
        });
    }
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
