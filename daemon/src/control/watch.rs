//! Reloading the configuration when asked (SIGHUP) and when the file
//! changes. The file is polled rather than watched with inotify: a
//! Kubernetes ConfigMap is updated by swapping a symlink, which polling
//! the content sees and inode watches easily miss.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Control;
use crate::config::layers;

/// How often the file is read to notice changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Reloads on SIGHUP and whenever the file's text changes, until `shutdown`.
pub async fn watch(control: Arc<Control>, poll: Duration, shutdown: CancellationToken) {
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(err) => {
            warn!(%err, "cannot listen for SIGHUP; the file is still watched");
            None
        }
    };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last text refused (or the last read error), so that a bad file is
    // reported once, not every poll.
    let mut refused: Option<String> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Some(()) = async { match hangups.as_mut() { Some(h) => h.recv().await, None => None } } => {
                info!("SIGHUP: reloading the configuration");
                refused = control.reload().err().map(|e| e.to_string());
            }
            _ = tick.tick() => {
                let Some(path) = control.file() else { continue };
                let seen = match layers::read(&path) {
                    Ok(text) => text,
                    Err(err) => {
                        let message = err.to_string();
                        if refused.as_deref() != Some(&message) {
                            warn!(error = %message, "config file unreadable; the running configuration stays");
                            refused = Some(message);
                        }
                        continue;
                    }
                };
                let current = control.current();
                if current.file_text.as_deref() == Some(seen.as_str()) || refused.as_deref() == Some(seen.as_str()) {
                    continue;
                }
                info!(file = %path.display(), "config file changed: reloading");
                refused = match control.reload() {
                    Ok(_) => None,
                    Err(_) => Some(seen),
                };
            }
        }
    }
}
