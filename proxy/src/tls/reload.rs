//! Picking up new certificate files without dropping connections.
//!
//! Every `tls.reload_seconds` the three files are read and hashed; when the
//! hash differs from the last one tried, they are parsed, checked and built
//! into new rustls configurations, which replace the old ones for the
//! handshakes that follow. Connections already made keep the session they
//! negotiated. A set that fails (a key that does not match, an expired
//! certificate, a file half written) is logged as an error and counted,
//! and the configurations in use stay. Hashing the contents rather than
//! watching modification times is what works with Kubernetes Secret
//! volumes, which rotate by swapping a symbolic link.

use std::sync::{Arc, PoisonError};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::context::{build, ReloadStats, TlsContext};
use super::material::{self, TlsError};
use super::validity::format_utc;

/// What one check of the files did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The files are as last tried.
    Unchanged,
    /// New files are in use.
    Reloaded,
    /// New files were refused; the previous configuration stays.
    Failed(TlsError),
}

impl TlsContext {
    /// Checks the files once and, if they changed, swaps in configurations
    /// built from them. Blocking (reads files); [`TlsContext::spawn_reloader`]
    /// calls it every `tls.reload_seconds`.
    pub fn reload_if_changed(&self) -> ReloadOutcome {
        let mut state = self.reload.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = match self.paths.read() {
            Err(err) => {
                // Hash the message: the same missing file is one failure.
                let fingerprint = xxhash_rust::xxh3::xxh3_128(err.to_string().as_bytes());
                if fingerprint == state.tried {
                    ReloadOutcome::Unchanged
                } else {
                    state.tried = fingerprint;
                    ReloadOutcome::Failed(err)
                }
            }
            Ok(files) => {
                let fingerprint = files.fingerprint();
                if fingerprint == state.tried {
                    ReloadOutcome::Unchanged
                } else {
                    state.tried = fingerprint;
                    match build(&files, &self.paths, &self.patterns, &self.provider) {
                        Ok(current) => {
                            state.stats.not_after_unix = current.not_after;
                            self.swap(current);
                            ReloadOutcome::Reloaded
                        }
                        Err(err) => ReloadOutcome::Failed(err),
                    }
                }
            }
        };
        match &outcome {
            ReloadOutcome::Unchanged => {}
            ReloadOutcome::Reloaded => {
                state.stats.successes += 1;
                info!(
                    cert = %self.paths.cert.display(),
                    not_after = %format_utc(state.stats.not_after_unix),
                    "TLS files changed: new handshakes use them, existing connections carry on"
                );
            }
            ReloadOutcome::Failed(err) => {
                state.stats.failures += 1;
                state.stats.last_error = Some(err.to_string());
                error!(
                    error = %err,
                    "TLS files changed but cannot be used; keeping the certificate in use"
                );
            }
        }
        let not_after = state.stats.not_after_unix;
        if state.warned_for != Some(not_after)
            && material::warn_if_expiring(&self.paths.cert, not_after)
        {
            state.warned_for = Some(not_after);
        }
        outcome
    }

    /// The reload counters and the `notAfter` of the certificate in use.
    pub fn reload_stats(&self) -> ReloadStats {
        self.reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .clone()
    }

    /// Checks the files every `tls.reload_seconds` until `shutdown` is
    /// cancelled.
    pub fn spawn_reloader(self: Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(self.reload_every) => {}
                    () = shutdown.cancelled() => break,
                }
                let context = self.clone();
                // Off the runtime's threads: file reads can block (a slow
                // volume), and the rebuild does public-key work.
                match tokio::task::spawn_blocking(move || context.reload_if_changed()).await {
                    Ok(_) => {}
                    Err(err) => error!(error = %err, "TLS reload check failed"),
                }
            }
            debug!("TLS reloader stopped");
        })
    }
}
