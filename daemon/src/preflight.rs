//! What tlcd checks before it starts, beyond the configuration's own
//! validation: the files it names (admin token, TLS certificates), the
//! flags that are no configuration keys, and that there is something to
//! listen on.
//!
//! Start-up and `--check-config` both call [`check`], so that
//! `--check-config` cannot say "would start" for a reason start-up then
//! fails on. It has no side effects: it reads files and listens on
//! nothing. Whether an address can be bound is left to start-up, since
//! `--check-config` often runs elsewhere (in CI, as another user) than
//! the tlcd it checks for, where a pod's address or a port below 1024
//! would fail for no fault of the configuration.

use thiserror::Error;

use tlc_core::ConfigError;

use crate::admin::token::{AdminToken, TokenError};
use crate::config::Config;

/// Most `--threads`: far above any pod's CPUs.
pub const MAX_THREADS: usize = 1024;

/// What start-up is asked to do besides the configuration: its flags.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--take-over`.
    pub take_over: bool,
}

/// Why tlcd would not start.
#[derive(Debug, Error)]
pub enum PreflightError {
    /// No route and no transparent listeners.
    #[error(
        "nothing to listen on: give --route LISTEN=UPSTREAM,ROLE, or a config file with \
         [[routes]] or [transparent]"
    )]
    NothingToListenOn,
    /// `--threads` out of range.
    #[error("--threads {0}: 1 to {MAX_THREADS}")]
    Threads(usize),
    /// `--take-over` with `handover_socket = "off"`.
    #[error("--take-over needs a hand-over socket, but handover_socket = \"off\"")]
    TakeOverWithoutSocket,
    /// `admin.token_file` cannot be used.
    #[error("admin API: admin.token_file = {path}")]
    Token {
        /// The configured path.
        path: String,
        /// Why not.
        #[source]
        cause: TokenError,
    },
    /// `[tls]` is on and its files cannot be used.
    #[error(transparent)]
    Tls(tlc_proxy::tls::TlsError),
    /// A value the configuration's validation refuses.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Every check start-up makes before it listens; the number of threads to
/// run (`None`: one per CPU).
pub fn check(config: &Config, options: &StartOptions) -> Result<Option<usize>, PreflightError> {
    if config.listeners().is_empty() {
        return Err(PreflightError::NothingToListenOn);
    }
    if let Some(n) = options.threads {
        if !(1..=MAX_THREADS).contains(&n) {
            return Err(PreflightError::Threads(n));
        }
    }
    if options.take_over && config.handover_path()?.is_none() {
        return Err(PreflightError::TakeOverWithoutSocket);
    }
    if config.admin.address()?.is_some() {
        if let Some(path) = &config.admin.token_file {
            AdminToken::from_file(path).map_err(|cause| PreflightError::Token {
                path: path.display().to_string(),
                cause,
            })?;
        }
    }
    if config.tls.enabled() {
        tlc_proxy::tls::TlsContext::load(&config.tls).map_err(PreflightError::Tls)?;
    }
    Ok(options.threads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Route;

    fn routed() -> Config {
        let mut config = Config::default();
        config.routes.push(Route {
            listen: "127.0.0.1:1".parse().unwrap(),
            upstream: "127.0.0.1:2".parse().unwrap(),
            role: tlc_core::Role::Inbound,
        });
        config
    }

    #[test]
    fn a_missing_token_file_is_found_before_start() {
        let mut config = routed();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        config.admin.token_file = Some(path.clone());
        let err = check(&config, &StartOptions::default()).unwrap_err();
        assert!(matches!(err, PreflightError::Token { .. }), "{err}");
        std::fs::write(&path, "a-token-long-enough-to-be-secret-0123456789\n").unwrap();
        check(&config, &StartOptions::default()).unwrap();
        // Without an admin API, no token is read.
        std::fs::remove_file(&path).unwrap();
        config.admin.listen = "off".into();
        check(&config, &StartOptions::default()).unwrap();
    }

    #[test]
    fn flags_and_listeners() {
        assert!(matches!(
            check(&Config::default(), &StartOptions::default()),
            Err(PreflightError::NothingToListenOn)
        ));
        let options = StartOptions {
            threads: Some(0),
            take_over: false,
        };
        assert!(matches!(
            check(&routed(), &options),
            Err(PreflightError::Threads(0))
        ));
        let mut config = routed();
        config.handover_socket = "off".into();
        let options = StartOptions {
            threads: Some(2),
            take_over: true,
        };
        assert!(matches!(
            check(&config, &options),
            Err(PreflightError::TakeOverWithoutSocket)
        ));
        config.handover_socket = "auto".into();
        assert_eq!(check(&config, &options).unwrap(), Some(2));
    }
}
