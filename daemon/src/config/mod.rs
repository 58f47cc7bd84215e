//! The daemon's configuration: its shape ([`Config`]), its validation
//! (errors that name the key, the bad value and what is allowed), and in
//! [`layers`] how built-in defaults, a TOML file, `TLC_*` environment
//! variables, flags and run-time changes combine.

pub mod admin;
pub mod destructive;
mod enum_error;
pub mod env_names;
pub mod layers;
pub mod log_filter;
mod strict;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod tls_tests;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tlc_core::{bounds, ConfigError, Role};
use tlc_proxy::intercept::Destination;
use tlc_proxy::limits::settings as limits;
use tlc_proxy::{Listener, ProxySettings, Target};
use tlc_sidecar::training::recovery;

/// One explicit route: connections accepted on `listen` are proxied to `upstream`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Address to accept connections on.
    pub listen: SocketAddr,
    /// Where to forward them: `IP:PORT`, or `NAME:PORT`, looked up once a
    /// connection has sent its first bytes (answers kept for 5 s).
    pub upstream: Destination,
    /// Which side of the path this route is.
    pub role: Role,
}

/// Transparent interception: listeners for connections that iptables
/// redirected (`deploy/iptables.sh`), forwarded to their original destination.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Transparent {
    /// Where outgoing connections of the local task are redirected to.
    pub outbound: SocketAddr,
    /// Where incoming connections to the local task are redirected to.
    pub inbound: SocketAddr,
}

/// Everything `tlcd` is configured with.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Explicit routes (listen address → upstream address).
    pub routes: Vec<Route>,
    /// Transparent interception listeners, if any.
    pub transparent: Option<Transparent>,
    /// Seconds tlcd keeps TensorFlow's connections after SIGTERM, waiting
    /// for TensorFlow to close them; it exits within this time.
    pub drain_seconds: u64,
    /// The Unix socket a successor (`tlcd --take-over`) takes the listening
    /// sockets over from: `auto` (a path derived from the first listener's
    /// port), `off`, or an absolute path.
    pub handover_socket: String,
    /// Whether the calls TensorFlow makes on one connection travel to the
    /// peer's sidecar as frames of one long-lived stream (a session, a few
    /// bytes of framing a call) instead of an HTTP/2 stream each. A peer
    /// that is no sidecar, or an older one, answers without taking the
    /// session, and the calls go as before.
    pub peer_sessions: bool,
    /// Which tensors are compressed and how.
    pub policy: tlc_sidecar::policy::PolicySettings,
    /// Bounds of the per-tensor state.
    pub contexts: ContextSettings,
    /// Bounds of memory, connections and time that peers and clients may use.
    pub limits: limits::LimitSettings,
    /// The admin API.
    pub admin: admin::AdminSettings,
    /// The Prometheus metrics endpoint.
    pub metrics: Endpoint,
    /// Logging.
    pub log: LogSettings,
    /// Mutual TLS between sidecars.
    pub tls: tlc_proxy::tls::TlsSettings,
    /// What to do when TensorFlow's recovery harms the training run.
    pub recovery: recovery::RecoverySettings,
    /// Settings known to destroy a model that are to be used all the same,
    /// by key: `["policy.sparse.codec"]` lets `[policy.sparse] codec =
    /// "3lc"` through (see [`destructive`]). Empty: every such setting is
    /// refused, with the reason.
    pub allow_destructive: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            routes: Vec::new(),
            transparent: None,
            drain_seconds: 30,
            handover_socket: "auto".into(),
            peer_sessions: true,
            policy: Default::default(),
            contexts: Default::default(),
            limits: Default::default(),
            admin: Default::default(),
            metrics: Endpoint {
                listen: DEFAULT_METRICS.into(),
            },
            log: Default::default(),
            tls: Default::default(),
            recovery: Default::default(),
            allow_destructive: Vec::new(),
        }
    }
}

/// Where the admin API listens by default: the pod's loopback only, since
/// it changes how tensors are compressed.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:17000";
/// Where Prometheus scrapes by default (read-only, so on every interface).
pub const DEFAULT_METRICS: &str = "0.0.0.0:17090";

/// The `[metrics]` table: a read-only HTTP endpoint of tlcd's own (the
/// admin API's table is [`admin::AdminSettings`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// `HOST:PORT`, or `off`.
    pub listen: String,
}

impl Endpoint {
    /// The address to bind, `None` when `off`; `key` names the table in errors.
    pub fn address(&self, key: &str) -> Result<Option<SocketAddr>, ConfigError> {
        listen_address(key, &self.listen)
    }
}

/// `listen` of the table `key` as an address to bind, `None` when `off`.
fn listen_address(key: &str, listen: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if listen == "off" {
        return Ok(None);
    }
    listen.parse().map(Some).map_err(|_| ConfigError::Invalid {
        key: format!("{key}.listen"),
        value: listen.to_string(),
        allowed: "a socket address such as 127.0.0.1:17000, or \"off\"".into(),
    })
}

/// The `[log]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// A `RUST_LOG`-style filter, e.g. `info,tlc_sidecar=debug`.
    pub level: String,
    /// `human` or `json`.
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: "info".into(),
            format: LogFormat::Human,
        }
    }
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    Human,
    /// One JSON object per event.
    Json,
}

/// The `[contexts]` table: how much per-tensor state a sidecar keeps.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextSettings {
    /// Memory budget of each table (push contexts, pull sources, replicas),
    /// in MiB. Unset: a fifth of `limits.memory_mib`.
    pub memory_mib: Option<u64>,
    /// A context unused this long is dropped.
    pub idle_seconds: u64,
    /// Deltas kept per pulled tensor for workers that fall behind; at least
    /// the number of workers for asynchronous training.
    pub pull_cache: usize,
    /// Original responses kept for fallbacks, in MiB. Unset: a twentieth of
    /// `limits.memory_mib`.
    pub fallback_mib: Option<u64>,
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            memory_mib: None,
            idle_seconds: tlc_sidecar::sidecar::DEFAULT_IDLE.as_secs(),
            pull_cache: tlc_context::pull::DEFAULT_CACHE_LEN,
            fallback_mib: None,
        }
    }
}

impl ContextSettings {
    /// The sidecar's bounds within `limits`, or the key of a value that
    /// cannot be used.
    pub fn options(
        &self,
        limits: &limits::Limits,
    ) -> Result<tlc_sidecar::sidecar::Options, ConfigError> {
        bounds::IDLE_SECONDS.check("contexts.idle_seconds", self.idle_seconds)?;
        bounds::PULL_CACHE.check(
            "contexts.pull_cache",
            u64::try_from(self.pull_cache).unwrap_or(u64::MAX),
        )?;
        let mut options = tlc_sidecar::sidecar::Options::within(limits);
        if let Some(mib) = self.memory_mib {
            bounds::MEMORY_MIB.check("contexts.memory_mib", mib)?;
            options.push_limits.max_bytes = mib_to_bytes(mib);
        }
        if let Some(mib) = self.fallback_mib {
            bounds::FALLBACK_MIB.check("contexts.fallback_mib", mib)?;
            options.fallback_bytes = mib_to_bytes(mib);
        }
        options.push_limits.max_age = std::time::Duration::from_secs(self.idle_seconds);
        options.pull_limits = options.push_limits;
        options.replica_limits = options.push_limits;
        options.pull_cache_len = self.pull_cache;
        Ok(options)
    }
}

fn mib_to_bytes(mib: u64) -> usize {
    usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
}

impl Config {
    /// Parses TOML text over the defaults and validates it, merged as a
    /// config file is (see [`layers`]).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        layers::Layers::default()
            .resolve_with(Some(text.to_string()))
            .map(|resolved| resolved.config)
    }

    /// Every listener: explicit routes first, then the transparent pair.
    pub fn listeners(&self) -> Vec<Listener> {
        let mut listeners: Vec<Listener> = self
            .routes
            .iter()
            .map(|r| Listener {
                listen: r.listen,
                target: Target::Fixed(r.upstream.clone()),
                role: r.role,
            })
            .collect();
        if let Some(t) = &self.transparent {
            for (listen, role) in [(t.outbound, Role::Outbound), (t.inbound, Role::Inbound)] {
                listeners.push(Listener {
                    listen,
                    target: Target::OriginalDestination,
                    role,
                });
            }
        }
        listeners
    }

    /// Where the hand-over socket is, `None` when `handover_socket = "off"`.
    pub fn handover_path(&self) -> Result<Option<PathBuf>, ConfigError> {
        match self.handover_socket.as_str() {
            "off" => Ok(None),
            "auto" => {
                let port = self.listeners().first().map_or(0, |l| l.listen.port());
                Ok(Some(tlc_proxy::handover::default_socket_path(port)))
            }
            path if path.starts_with('/') => Ok(Some(PathBuf::from(path))),
            other => Err(ConfigError::Invalid {
                key: "handover_socket".into(),
                value: other.into(),
                allowed: "auto, off, or an absolute path".into(),
            }),
        }
    }

    /// What the proxy runs with: every listener, `[limits]`, `[tls]` and
    /// `drain_seconds`.
    pub fn proxy_settings(&self) -> Result<ProxySettings, ConfigError> {
        Ok(ProxySettings {
            listeners: self.listeners(),
            limits: self.limits.limits()?,
            tls: self.tls.clone(),
            drain: std::time::Duration::from_secs(self.drain_seconds),
            sessions: self.peer_sessions,
        })
    }

    /// The sidecar's bounds: `[limits]`, and `[contexts]` within them.
    pub fn sidecar_options(&self) -> Result<tlc_sidecar::sidecar::Options, ConfigError> {
        self.contexts.options(&self.limits.limits()?)
    }

    /// Checks values that the types alone do not constrain.
    pub fn validate(&self) -> Result<(), ConfigError> {
        bounds::DRAIN_SECONDS.check("drain_seconds", self.drain_seconds)?;
        self.handover_path()?;
        tlc_sidecar::policy::Policy::new(&self.policy)?;
        destructive::check(self)?;
        self.sidecar_options()?;
        self.admin.validate()?;
        self.metrics.address("metrics")?;
        self.tls.validate()?;
        self.recovery.validate()?;
        if let Err(err) = log_filter::parse(&self.log.level) {
            return Err(ConfigError::Invalid {
                key: "log.level".into(),
                value: self.log.level.clone(),
                allowed: format!("a filter such as info or warn,tlc_sidecar=debug: {err}"),
            });
        }
        if let Some(t) = &self.transparent {
            if t.outbound == t.inbound {
                return Err(ConfigError::Invalid {
                    key: "transparent.inbound".into(),
                    value: t.inbound.to_string(),
                    allowed: "must differ from transparent.outbound".into(),
                });
            }
        }
        for (i, route) in self.routes.iter().enumerate() {
            if route.upstream == Destination::Addr(route.listen) {
                return Err(ConfigError::Invalid {
                    key: format!("routes[{i}].upstream"),
                    value: route.upstream.to_string(),
                    allowed: "must differ from the listen address (it would loop)".into(),
                });
            }
            if let Some(j) = self.routes[..i]
                .iter()
                .position(|r| r.listen == route.listen)
            {
                return Err(ConfigError::Invalid {
                    key: format!("routes[{i}].listen"),
                    value: route.listen.to_string(),
                    allowed: format!("must differ from routes[{j}].listen"),
                });
            }
        }
        self.addresses_apart()
    }

    /// Refuses two listeners of tlcd's on one address (`admin.listen` =
    /// `metrics.listen`, or a route on the admin port): the second could
    /// not be bound, and tlcd would exit at start.
    fn addresses_apart(&self) -> Result<(), ConfigError> {
        let mut bound: Vec<(String, SocketAddr)> = Vec::new();
        if let Some(addr) = self.admin.address()? {
            bound.push(("admin.listen".into(), addr));
        }
        if let Some(addr) = self.metrics.address("metrics")? {
            bound.push(("metrics.listen".into(), addr));
        }
        for (i, route) in self.routes.iter().enumerate() {
            bound.push((format!("routes[{i}].listen"), route.listen));
        }
        if let Some(t) = &self.transparent {
            bound.push(("transparent.outbound".into(), t.outbound));
            bound.push(("transparent.inbound".into(), t.inbound));
        }
        for (i, (key, addr)) in bound.iter().enumerate() {
            if let Some((other, at)) = bound[..i].iter().find(|(_, at)| overlap(*at, *addr)) {
                return Err(ConfigError::Invalid {
                    key: key.clone(),
                    value: addr.to_string(),
                    allowed: format!("must differ from {other} = {at}: tlcd cannot listen on both"),
                });
            }
        }
        Ok(())
    }
}

/// Whether two addresses cannot both be listened on: one port (not 0, which
/// picks a free one) on the same IP, or on an IP and the wildcard covering it.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let (x, y) = (a.ip(), b.ip());
    // `[::]` takes IPv4 too where the system maps it (Linux's default).
    x == y
        || (x.is_unspecified() && (x.is_ipv6() || y.is_ipv4()))
        || (y.is_unspecified() && (y.is_ipv6() || x.is_ipv4()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why the configuration `text` is refused (the test fails if it is
    /// not).
    fn refusal(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn routes_parse_and_validate() {
        let config = Config::from_toml(
            r#"
            [[routes]]
            listen = "127.0.0.1:3000"
            upstream = "127.0.0.1:4000"
            role = "outbound"
            "#,
        )
        .unwrap();
        assert_eq!(config.routes.len(), 1);
        assert_eq!(config.routes[0].role, Role::Outbound);
        assert_eq!(config.drain_seconds, 30);
    }

    #[test]
    fn contexts_bound_the_sidecar() {
        let config = Config::from_toml("[contexts]\npull_cache = 16\nmemory_mib = 64\n").unwrap();
        let options = config.sidecar_options().unwrap();
        assert_eq!(options.pull_cache_len, 16);
        assert_eq!(options.replica_limits.max_bytes, 64 << 20);
        assert_eq!(
            Config::default().sidecar_options().unwrap().pull_cache_len,
            8
        );
        let err = refusal("[contexts]\npull_cache = 0\n");
        assert_eq!(err, "contexts.pull_cache = 0: 1 to 4096 (deltas)");
    }

    #[test]
    fn two_listeners_on_one_address_are_refused() {
        let err = refusal(
            "[admin]\nlisten = \"127.0.0.1:17090\"\n[metrics]\nlisten = \"0.0.0.0:17090\"\n",
        );
        assert_eq!(
            err,
            "metrics.listen = 0.0.0.0:17090: must differ from admin.listen = 127.0.0.1:17090: \
             tlcd cannot listen on both"
        );
        let err = refusal(
            "[[routes]]\nlisten = \"127.0.0.1:17000\"\nupstream = \"127.0.0.1:2\"\nrole = \"inbound\"\n",
        );
        assert!(
            err.starts_with("routes[0].listen = 127.0.0.1:17000: must differ from admin.listen"),
            "{err}"
        );
        // Other IPs, port 0, and an endpoint turned off do not collide.
        Config::from_toml(
            "[admin]\nlisten = \"127.0.0.2:17090\"\n[metrics]\nlisten = \"127.0.0.1:17090\"\n",
        )
        .unwrap();
        Config::from_toml(
            "[admin]\nlisten = \"127.0.0.1:0\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        Config::from_toml("[admin]\nlisten = \"off\"\n[metrics]\nlisten = \"off\"\n").unwrap();
        assert!(overlap(
            "[::]:5".parse().unwrap(),
            "127.0.0.1:5".parse().unwrap()
        ));
        assert!(!overlap(
            "0.0.0.0:5".parse().unwrap(),
            "[::1]:5".parse().unwrap()
        ));
    }

    #[test]
    fn errors_name_the_key() {
        let err = refusal(
            "[[routes]]\nlisten = \"127.0.0.1:3000\"\nupstream = \"127.0.0.1:3000\"\nrole = \"inbound\"\n",
        );
        assert!(
            err.starts_with("routes[0].upstream = 127.0.0.1:3000"),
            "{err}"
        );
        let err = refusal("[[routes]]\nlisten = \"nowhere\"\n");
        assert!(err.contains("listen"), "{err}");
        let err = refusal("colour = 3\n");
        assert!(err.contains("colour"), "{err}");
    }
}
