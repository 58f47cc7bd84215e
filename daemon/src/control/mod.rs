//! The running configuration and every way it changes: a reload of the
//! file (SIGHUP, or the file changed), a change through the admin API, a
//! new log filter. A change is validated whole before anything is touched;
//! a bad one is refused and the running configuration stays.

pub mod log;
mod overridden;
pub mod policy_change;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use thiserror::Error;
use tlc_admin_api::status::Reloads;
use tracing::{info, warn};

use crate::config::layers::{Layers, Resolved};
use crate::config::Config;
use log::LogControl;
use policy_change::PolicyChange;
use tlc_core::ConfigError;
use tlc_sidecar::policy::Policy;
use tlc_sidecar::sidecar::Sidecar;

/// Why a change was refused. Nothing changed.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The resulting configuration is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The key cannot change while tlcd runs.
    #[error(
        "{key} cannot change while tlcd runs: {why}; change it in the config file and restart tlcd"
    )]
    RestartOnly {
        /// The key.
        key: &'static str,
        /// What it binds or sizes.
        why: &'static str,
    },
    /// The request itself makes no sense.
    #[error("{0}")]
    BadRequest(String),
}

/// A key whose value is fixed at start (a socket, the size of something set
/// up once): a reload keeps its running value (and says so); the API
/// refuses to change it. Each entry compares and restores its own field, so
/// adding a key is one line here.
struct RestartOnly {
    key: &'static str,
    why: &'static str,
    same: fn(&Config, &Config) -> bool,
    keep: fn(&Config, &mut Config),
}

const RESTART_ONLY: &[RestartOnly] = &[
    RestartOnly {
        key: "routes",
        why: "listeners are bound at start",
        same: |old, new| old.routes == new.routes,
        keep: |old, new| new.routes = old.routes.clone(),
    },
    RestartOnly {
        key: "transparent",
        why: "listeners are bound at start",
        same: |old, new| old.transparent == new.transparent,
        keep: |old, new| new.transparent = old.transparent.clone(),
    },
    RestartOnly {
        key: "admin",
        why: "the admin API is bound at start",
        same: |old, new| old.admin == new.admin,
        keep: |old, new| new.admin = old.admin.clone(),
    },
    RestartOnly {
        key: "metrics",
        why: "the metrics endpoint is bound at start",
        same: |old, new| old.metrics == new.metrics,
        keep: |old, new| new.metrics = old.metrics.clone(),
    },
    RestartOnly {
        key: "log.format",
        why: "the log writer is set up at start",
        same: |old, new| old.log.format == new.log.format,
        keep: |old, new| new.log.format = old.log.format,
    },
    RestartOnly {
        key: "tls",
        why: "the TLS context is built at start (its certificate files are reloaded on their own)",
        same: |old, new| old.tls == new.tls,
        keep: |old, new| new.tls = old.tls.clone(),
    },
    RestartOnly {
        key: "drain_seconds",
        why: "the shutdown is set up at start",
        same: |old, new| old.drain_seconds == new.drain_seconds,
        keep: |old, new| new.drain_seconds = old.drain_seconds,
    },
    RestartOnly {
        key: "handover_socket",
        why: "the hand-over socket is bound at start",
        same: |old, new| old.handover_socket == new.handover_socket,
        keep: |old, new| new.handover_socket = old.handover_socket.clone(),
    },
    RestartOnly {
        key: "peer_sessions",
        why: "connections to peers are set up with it",
        same: |old, new| old.peer_sessions == new.peer_sessions,
        keep: |old, new| new.peer_sessions = old.peer_sessions,
    },
    RestartOnly {
        key: "contexts.pull_cache",
        why: "pull sources are sized when created",
        same: |old, new| old.contexts.pull_cache == new.contexts.pull_cache,
        keep: |old, new| new.contexts.pull_cache = old.contexts.pull_cache,
    },
    RestartOnly {
        key: "limits",
        why: "connections, budgets and the memory total are set up at start",
        same: |old, new| old.limits == new.limits,
        keep: |old, new| new.limits = old.limits.clone(),
    },
    RestartOnly {
        key: "contexts.fallback_mib",
        why: "the fallback cache is sized at start",
        same: |old, new| old.contexts.fallback_mib == new.contexts.fallback_mib,
        keep: |old, new| new.contexts.fallback_mib = old.contexts.fallback_mib,
    },
];

/// The restart-only keys whose values differ between `old` and `new`.
fn restart_only_changes<'a>(
    old: &'a Config,
    new: &'a Config,
) -> impl Iterator<Item = &'static RestartOnly> + 'a {
    RESTART_ONLY.iter().filter(move |r| !(r.same)(old, new))
}

/// One change to the API layer.
#[derive(Debug, Clone)]
pub enum ApiChange {
    /// Set the key (JSON `null` unsets it whatever lower layers say).
    Set(serde_json::Value),
    /// Drop the key from the API layer: lower layers apply again.
    Remove,
}

/// The running configuration of one tlcd and the parts it drives.
pub struct Control {
    layers: Mutex<Layers>,
    current: RwLock<Arc<Resolved>>,
    sidecar: Arc<Sidecar>,
    log: LogControl,
    reloads: Mutex<Reloads>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("config", &self.current().config)
            .finish()
    }
}

impl Control {
    /// Control of a sidecar started with `resolved` (made from `layers`).
    pub fn new(
        layers: Layers,
        resolved: Resolved,
        sidecar: Arc<Sidecar>,
        log: LogControl,
    ) -> Control {
        Control {
            layers: Mutex::new(layers),
            current: RwLock::new(Arc::new(resolved)),
            sidecar,
            log,
            reloads: Mutex::new(Reloads::default()),
        }
    }

    /// The configuration in force and where its values came from.
    pub fn current(&self) -> Arc<Resolved> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The sidecar this configuration drives.
    pub fn sidecar(&self) -> &Arc<Sidecar> {
        &self.sidecar
    }

    /// The log filter.
    pub fn log(&self) -> &LogControl {
        &self.log
    }

    /// The config file, if any.
    pub fn file(&self) -> Option<std::path::PathBuf> {
        self.lock_layers().file.clone()
    }

    /// Reload counters, as `/v1/status` shows them.
    pub fn reload_stats(&self) -> Reloads {
        self.reloads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reload counters as JSON.
    pub fn reloads(&self) -> serde_json::Value {
        serde_json::to_value(self.reload_stats()).unwrap_or(serde_json::Value::Null)
    }

    fn lock_layers(&self) -> std::sync::MutexGuard<'_, Layers> {
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the config file. Restart-only keys keep their running
    /// values (logged); anything invalid is refused whole.
    pub fn reload(&self) -> Result<Arc<Resolved>, ControlError> {
        let layers = self.lock_layers();
        // The file must be valid on its own, not only while changes made
        // through the API happen to cover its bad values.
        let without_api = Layers {
            api: Default::default(),
            ..layers.clone()
        };
        let result = without_api
            .resolve()
            .and_then(|below| layers.resolve_with(below.file_text))
            .map_err(ControlError::from)
            .and_then(|mut new| {
                let old = self.current();
                let pending: Vec<&RestartOnly> =
                    restart_only_changes(&old.config, &new.config).collect();
                for r in &pending {
                    (r.keep)(&old.config, &mut new.config);
                }
                let names: Vec<String> = pending.iter().map(|r| r.key.to_string()).collect();
                if !names.is_empty() {
                    warn!(keys = ?names, "config file changes that take effect only at restart");
                }
                let changed = overridden::changed_keys(
                    old.file_text.as_deref(),
                    new.file_text.as_deref(),
                );
                let overridden = overridden::overridden(&changed, &new);
                if !overridden.is_empty() {
                    warn!(keys = ?overridden, "config file changes without effect: a TLC_* variable, a flag or the admin API sets these keys");
                }
                let installed = self.install(new)?;
                let mut stats = self.reloads.lock().unwrap_or_else(|e| e.into_inner());
                stats.ok += 1;
                stats.pending_restart = names;
                stats.overridden = overridden;
                Ok(installed)
            });
        drop(layers);
        match &result {
            Ok(_) => {
                self.sidecar.stats().config_reloaded(true);
                info!("configuration reloaded");
            }
            Err(err) => {
                let mut stats = self.reloads.lock().unwrap_or_else(|e| e.into_inner());
                stats.failed += 1;
                stats.last_error = Some(err.to_string());
                self.sidecar.stats().config_reloaded(false);
                warn!(error = %err, "configuration reload refused; the running configuration stays");
            }
        }
        result
    }

    /// Changes keys in the API layer, validated whole.
    pub fn change(
        &self,
        changes: &BTreeMap<String, ApiChange>,
    ) -> Result<Arc<Resolved>, ControlError> {
        let mut layers = self.lock_layers();
        let mut next = layers.clone();
        for (key, change) in changes {
            if let Some(r) = RESTART_ONLY
                .iter()
                .find(|r| key == r.key || key.starts_with(&format!("{}.", r.key)))
            {
                return Err(ControlError::RestartOnly {
                    key: r.key,
                    why: r.why,
                });
            }
            match change {
                ApiChange::Set(value) => {
                    next.api.insert(key.clone(), value.clone());
                }
                ApiChange::Remove => {
                    next.api.remove(key);
                }
            }
        }
        // The file as it was last read: an API change is not a reload.
        let file_text = self.current().file_text.clone();
        let new = next.resolve_with(file_text)?;
        let old = self.current();
        if let Some(r) = restart_only_changes(&old.config, &new.config).next() {
            return Err(ControlError::RestartOnly {
                key: r.key,
                why: r.why,
            });
        }
        let installed = self.install(new)?;
        *layers = next;
        info!(keys = ?changes.keys().collect::<Vec<_>>(), "configuration changed through the admin API");
        Ok(installed)
    }

    /// Applies an operator's retuning; returns the keys it changed.
    pub fn change_policy(
        &self,
        change: &PolicyChange,
    ) -> Result<(Vec<String>, Arc<Resolved>), ControlError> {
        let keys = policy_change::keys_for(change, &self.current().config)?;
        let changes = keys
            .into_iter()
            .map(|(k, v)| (k, ApiChange::Set(v)))
            .collect::<BTreeMap<_, _>>();
        let resolved = self.change(&changes)?;
        Ok((changes.into_keys().collect(), resolved))
    }

    /// Puts a validated configuration in force: policy, context bounds,
    /// recovery, log filter. Policy first: it is the one that can still fail.
    fn install(&self, new: Resolved) -> Result<Arc<Resolved>, ControlError> {
        let policy = Policy::new(&new.config.policy)?;
        let options = new.config.sidecar_options()?;
        self.log
            .set(&new.config.log.level)
            .map_err(|e| ConfigError::Invalid {
                key: "log.level".into(),
                value: new.config.log.level.clone(),
                allowed: e,
            })?;
        self.sidecar.set_policy(policy);
        self.sidecar.set_table_limits(options.push_limits);
        self.sidecar.set_recovery(new.config.recovery);
        let new = Arc::new(new);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&new);
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;
    use tlc_codec::{Codec, Sparsity};

    fn control_with_file(text: &str) -> (Control, tempfile::NamedTempFile) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let layers = Layers {
            file: Some(f.path().to_owned()),
            ..Layers::default()
        };
        (control_of(layers), f)
    }

    /// A control over `layers`, its sidecar built from them.
    fn control_of(layers: Layers) -> Control {
        let resolved = layers.resolve().unwrap();
        let sidecar = Arc::new(Sidecar::new(
            Policy::new(&resolved.config.policy).unwrap(),
            resolved.config.sidecar_options().unwrap(),
            None,
        ));
        let log = LogControl::detached(&resolved.config.log.level);
        Control::new(layers, resolved, sidecar, log)
    }

    fn push_codec(control: &Control) -> Codec {
        control
            .sidecar()
            .policy()
            .codec_for(tlc_core::Direction::Push)
            .codec
    }

    fn three_lc(s: f32) -> Codec {
        Codec::ThreeLc {
            sparsity: Sparsity::new(s).unwrap(),
        }
    }

    #[test]
    fn a_bad_reload_keeps_the_running_configuration() {
        let (control, f) = control_with_file("[policy.push]\nsparsity = 1.5\n");
        assert_eq!(push_codec(&control), three_lc(1.5));
        std::fs::write(f.path(), "[policy.push]\nsparsity = 2.5\n").unwrap();
        let err = control.reload().unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"
        );
        assert_eq!(push_codec(&control), three_lc(1.5));
        std::fs::write(f.path(), "[policy.push]\nsparsity = 1.75\n").unwrap();
        control.reload().unwrap();
        assert_eq!(push_codec(&control), three_lc(1.75));
    }

    #[test]
    fn a_reload_keeps_restart_only_values() {
        let (control, f) = control_with_file("drain_seconds = 7\n");
        std::fs::write(f.path(), "drain_seconds = 9\n[policy]\nmin_bytes = 1\n").unwrap();
        let resolved = control.reload().unwrap();
        assert_eq!(resolved.config.drain_seconds, 7);
        assert_eq!(resolved.config.policy.min_bytes, 1);
        assert_eq!(
            control.reloads()["pending_restart"],
            json!(["drain_seconds"])
        );
    }

    #[test]
    fn a_file_change_a_variable_overrides_is_named() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"[policy.push]\nsparsity = 1.5\n").unwrap();
        let control = control_of(Layers {
            file: Some(f.path().to_owned()),
            env: Layers::env_from([("TLC_POLICY__PUSH__SPARSITY".to_string(), "1.25".to_string())]),
            ..Layers::default()
        });
        std::fs::write(
            f.path(),
            "[policy.push]\nsparsity = 1.75\n[policy]\nmin_bytes = 8192\n",
        )
        .unwrap();
        control.reload().unwrap();
        assert_eq!(push_codec(&control), three_lc(1.25));
        assert_eq!(
            control.reloads()["overridden"],
            json!(["policy.push.sparsity (env TLC_POLICY__PUSH__SPARSITY)"])
        );
    }

    #[test]
    fn api_changes_apply_and_survive_reloads() {
        let (control, f) = control_with_file("");
        let change = PolicyChange {
            sparsity: Some(1.9),
            direction: Some(tlc_sidecar::policy::Directions::Push),
            ..PolicyChange::default()
        };
        let (keys, _) = control.change_policy(&change).unwrap();
        assert_eq!(keys, ["policy.push.sparsity"]);
        assert_eq!(push_codec(&control), three_lc(1.9));
        std::fs::write(f.path(), "[policy]\nmin_bytes = 1\n").unwrap();
        let resolved = control.reload().unwrap();
        assert_eq!(resolved.config.policy.min_bytes, 1);
        assert_eq!(push_codec(&control), three_lc(1.9));
        // A bad value in the file is refused even where the API covers it.
        std::fs::write(f.path(), "[policy.push]\nsparsity = 7\n").unwrap();
        assert!(control.reload().is_err());
        assert_eq!(control.current().config.policy.min_bytes, 1);
    }

    #[test]
    fn recovery_changes_apply_live() {
        use tlc_sidecar::training::recovery::OnModelReset;
        let (control, _f) = control_with_file("[recovery]\nstall_warn_seconds = 60\n");
        let changes = BTreeMap::from([(
            "recovery.on_model_reset".to_string(),
            ApiChange::Set(json!("warn")),
        )]);
        control.change(&changes).unwrap();
        let settings = control.sidecar().recovery();
        assert_eq!(settings.on_model_reset, OnModelReset::Warn);
        assert_eq!(settings.stall_warn_seconds, 60);
        let bad = BTreeMap::from([(
            "recovery.on_model_reset".to_string(),
            ApiChange::Set(json!("ignore")),
        )]);
        assert!(control.change(&bad).is_err());
        assert_eq!(
            control.sidecar().recovery().on_model_reset,
            OnModelReset::Warn
        );
    }

    #[test]
    fn bad_api_changes_change_nothing() {
        let (control, _f) = control_with_file("");
        let bad = PolicyChange {
            sparsity: Some(2.5),
            ..PolicyChange::default()
        };
        let err = control.change_policy(&bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"
        );
        assert_eq!(push_codec(&control), three_lc(1.0));
        let changes = BTreeMap::from([("routes".to_string(), ApiChange::Set(json!([])))]);
        assert!(matches!(
            control.change(&changes),
            Err(ControlError::RestartOnly { key: "routes", .. })
        ));
        let changes =
            BTreeMap::from([("policy.push.colour".to_string(), ApiChange::Set(json!(1)))]);
        let err = control.change(&changes).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
        assert!(control
            .current()
            .sources
            .values()
            .all(|o| *o != crate::config::layers::Origin::Api));
    }
}
