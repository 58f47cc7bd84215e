//! The `[tls]` table: whether sidecars speak mutual TLS to each other, the
//! files that hold our certificate, key and trusted CAs, and who a peer
//! must be.
//!
//! ```toml
//! [tls]
//! mode = "mutual"
//! cert = "/etc/tlc/tls/tls.crt"   # PEM chain, our certificate first
//! key = "/etc/tlc/tls/tls.key"    # PEM key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC)
//! ca = "/etc/tlc/tls/ca.crt"      # PEM bundle of CAs trusted for peers
//! peer_identities = ["spiffe://cluster.local/ns/training/sa/*"]
//! reload_seconds = 10
//! accept_plaintext = false        # true only while TLS is rolled out task by task
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::identity::PeerPatterns;
use super::material::Paths;
use tlc_core::ConfigError;

/// Whether the sidecars' connections to each other are encrypted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plain HTTP/2 (h2c) between sidecars.
    #[default]
    Off,
    /// TLS 1.3 both ways: each sidecar presents its certificate, and each
    /// checks the other's against `ca` and `peer_identities`.
    Mutual,
}

/// The `[tls]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// `off` (default) or `mutual`.
    pub mode: TlsMode,
    /// Our certificate chain (PEM), leaf first. Any file name: a
    /// Kubernetes TLS Secret mounts it as `tls.crt`.
    pub cert: Option<PathBuf>,
    /// Our private key (PEM: PKCS#8, PKCS#1 or SEC1), e.g. `tls.key`.
    pub key: Option<PathBuf>,
    /// The CA certificates (PEM bundle) a peer's chain must lead to, e.g. `ca.crt`.
    pub ca: Option<PathBuf>,
    /// Patterns a peer's certificate must match, at least one in mutual
    /// mode: `spiffe://DOMAIN/path/*` (URI SAN, `*` one path segment) or
    /// `dns:*.svc.example` (DNS SAN, `*` one label); see [`super::identity`].
    pub peer_identities: Vec<String>,
    /// How often the three files are checked for a change, in seconds (1 to 3600).
    pub reload_seconds: u64,
    /// Whether a plaintext HTTP/2 caller (a task without a sidecar) is
    /// forwarded to TensorFlow as TensorFlow would answer it, never
    /// compressed. Off by default: with mutual TLS nothing reaches the
    /// task from a caller that did not authenticate. On only while TLS is
    /// being rolled out task by task.
    pub accept_plaintext: bool,
}

/// Default of `tls.reload_seconds`.
pub const DEFAULT_RELOAD_SECONDS: u64 = 10;
/// Bounds of `tls.reload_seconds`: at least once an hour, at most every second.
const RELOAD_SECONDS: std::ops::RangeInclusive<u64> = 1..=3600;

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            mode: TlsMode::Off,
            cert: None,
            key: None,
            ca: None,
            peer_identities: Vec::new(),
            reload_seconds: DEFAULT_RELOAD_SECONDS,
            accept_plaintext: false,
        }
    }
}

impl TlsSettings {
    /// Whether sidecars speak TLS to each other.
    pub fn enabled(&self) -> bool {
        self.mode == TlsMode::Mutual
    }

    /// Checks the values (not the files: [`super::TlsContext::load`] reads
    /// those). Patterns are checked in every mode, so a mistake shows
    /// before TLS is switched on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.mode {
            TlsMode::Off => {
                self.reload_interval()?;
                self.patterns().map(drop)
            }
            TlsMode::Mutual => self.mutual().map(drop),
        }
    }

    /// What mutual TLS needs, checked: the reload interval, the patterns
    /// (at least one) and the three files.
    pub(super) fn mutual(&self) -> Result<(Paths, PeerPatterns, Duration), ConfigError> {
        let every = self.reload_interval()?;
        let patterns = self.patterns()?;
        let paths = Paths {
            cert: required_path("cert", &self.cert, "a PEM certificate chain file")?,
            key: required_path("key", &self.key, "a PEM private key file")?,
            ca: required_path("ca", &self.ca, "a PEM file of CA certificates")?,
        };
        if self.peer_identities.is_empty() {
            return Err(ConfigError::Invalid {
                key: "tls.peer_identities".into(),
                value: "[]".into(),
                allowed: "at least one pattern when tls.mode = \"mutual\", e.g. \
                          [\"spiffe://cluster.local/ns/training/sa/*\"]"
                    .into(),
            });
        }
        Ok((paths, patterns, every))
    }

    /// `reload_seconds`, checked.
    fn reload_interval(&self) -> Result<Duration, ConfigError> {
        if !RELOAD_SECONDS.contains(&self.reload_seconds) {
            return Err(ConfigError::Invalid {
                key: "tls.reload_seconds".into(),
                value: self.reload_seconds.to_string(),
                allowed: format!(
                    "{} to {} seconds",
                    RELOAD_SECONDS.start(),
                    RELOAD_SECONDS.end()
                ),
            });
        }
        Ok(Duration::from_secs(self.reload_seconds))
    }

    /// `peer_identities`, parsed; a bad pattern is named by its index.
    pub fn patterns(&self) -> Result<PeerPatterns, ConfigError> {
        PeerPatterns::parse(&self.peer_identities).map_err(|(i, err)| ConfigError::Invalid {
            key: format!("tls.peer_identities[{i}]"),
            value: self.peer_identities[i].clone(),
            allowed: err.to_string(),
        })
    }
}

fn required_path(name: &str, path: &Option<PathBuf>, what: &str) -> Result<PathBuf, ConfigError> {
    match path {
        Some(path) if !path.as_os_str().is_empty() => Ok(path.clone()),
        _ => Err(ConfigError::Invalid {
            key: format!("tls.{name}"),
            value: "unset".into(),
            allowed: format!("{what}; required when tls.mode = \"mutual\""),
        }),
    }
}
