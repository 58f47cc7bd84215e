//! The `[admin]` table: where the admin API listens, which token it asks
//! for, and which `Host` names it answers to.
//!
//! ```toml
//! [admin]
//! listen = "127.0.0.1:17000"                # or "off"
//! token_file = "/var/run/secrets/tlc/token" # default: a token tlcd makes at start
//! allowed_hosts = ["tlc-admin.ml.svc"]      # besides localhost and the listen address
//! ```
//!
//! There is no setting that turns authentication off: an admin API that
//! should not ask for a token should not listen (`listen = "off"`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, DEFAULT_ADMIN};

/// The `[admin]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// `HOST:PORT`, or `off`.
    pub listen: String,
    /// A file holding the bearer token every request but the probes must
    /// send; re-read when it changes. Unset: tlcd makes a random token at
    /// start and writes it where `tlcctl` looks for it
    /// (`tlc_admin_api::default_token`).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// `Host` names accepted besides `localhost`, `127.0.0.1`, `[::1]` and
    /// the listen address: a pod IP or a Service name, for an admin API
    /// reached from outside the pod.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            listen: DEFAULT_ADMIN.into(),
            token_file: None,
            allowed_hosts: Vec::new(),
        }
    }
}

impl AdminSettings {
    /// The address to bind, `None` when `off`.
    pub fn address(&self) -> Result<Option<SocketAddr>, ConfigError> {
        super::listen_address("admin", &self.listen)
    }

    /// Checks the table, naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.address()?;
        if let Some(path) = &self.token_file {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::Invalid {
                    key: "admin.token_file".into(),
                    value: "\"\"".into(),
                    allowed: "the path of a file holding the admin token; leave the key unset \
                              for a token tlcd makes itself (authentication cannot be turned off; \
                              admin.listen = \"off\" turns the admin API off)"
                        .into(),
                });
            }
        }
        for (i, host) in self.allowed_hosts.iter().enumerate() {
            if normalise_host(host).is_none() {
                return Err(ConfigError::Invalid {
                    key: format!("admin.allowed_hosts[{i}]"),
                    value: format!("{host:?}"),
                    allowed: "a host name or IP address without port or wildcard, \
                              e.g. tlc-admin.ml.svc or 10.0.0.5"
                        .into(),
                });
            }
        }
        Ok(())
    }
}

/// A host name or IP address as `Host` headers carry it: lower case, an
/// IPv6 address in brackets; `None` if it is neither a DNS name nor an
/// address (a port, a wildcard, a path, spaces).
pub fn normalise_host(text: &str) -> Option<String> {
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (name.len() <= 253 && name.split('.').all(label_ok)).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_normalise() {
        assert_eq!(
            normalise_host("Tlc-Admin.ml.svc."),
            Some("tlc-admin.ml.svc".into())
        );
        assert_eq!(normalise_host("10.0.0.5"), Some("10.0.0.5".into()));
        assert_eq!(normalise_host("fd00::1"), Some("[fd00::1]".into()));
        assert_eq!(normalise_host("[FD00::1]"), Some("[fd00::1]".into()));
        for bad in ["", "*", "*.svc", "host:80", "a b", "a/b", "a..b", "[nope]"] {
            assert_eq!(normalise_host(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn no_way_to_turn_authentication_off() {
        let settings = AdminSettings {
            token_file: Some(PathBuf::new()),
            ..AdminSettings::default()
        };
        let err = settings.validate().unwrap_err().to_string();
        assert!(err.starts_with("admin.token_file = \"\": "), "{err}");
        assert!(err.contains("admin.listen = \"off\""), "{err}");
        let settings = AdminSettings {
            allowed_hosts: vec!["ok.svc".into(), "*".into()],
            ..AdminSettings::default()
        };
        assert!(settings
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("admin.allowed_hosts[1] = \"*\": a host name or IP address"));
    }
}
