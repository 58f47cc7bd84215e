//! Arbitrary bytes as the JSON body of every admin API change
//! (`daemon/ADMIN-API.md`): `PATCH /v1/config` (dotted keys, `null`
//! removes), `POST /v1/policy` (`PolicyChange`, through
//! `policy_change::keys_for`) and `PUT /v1/log-level`, read as
//! `admin::body` reads them and applied through `Control`, as the handlers
//! do, to a sidecar started from a file (detached log).
//!
//! The first byte picks the endpoint. Must hold: no panic; a refused change
//! leaves everything as it was: the running configuration (its JSON, byte
//! for byte), where each value came from, the sidecar's policy, its table
//! bounds and the log filter, and the API layer (a good change after it
//! gives what it gives on a fresh sidecar); an accepted one is a valid
//! configuration, in force in the sidecar and the log filter, with every
//! restart-only key as it was. Seeds: the examples of ADMIN-API.md
//! (`cargo run --bin seeds -- corpus`).

#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tlc_admin_api::PolicyRequest;
use tlc_daemon::config::layers::{Layers, Resolved};
use tlc_daemon::config::Config;
use tlc_daemon::control::log::LogControl;
use tlc_daemon::control::policy_change::{self, PolicyChange};
use tlc_daemon::control::{ApiChange, Control, ControlError};
use tlc_sidecar::policy::Policy;
use tlc_sidecar::Sidecar;

/// The file the sidecar started with: a route, overrides, bounds.
const FILE: &str = r#"
drain_seconds = 5
[[routes]]
listen = "127.0.0.1:5322"
upstream = "127.0.0.1:4322"
role = "outbound"
[policy]
min_bytes = 1000
[policy.push]
sparsity = 1.5
[[policy.overrides]]
tensor = "*batch_norm*"
skip = true
[contexts]
memory_mib = 64
[limits]
memory_mib = 256
[log]
level = "warn"
"#;

/// The body of `PUT /v1/log-level` (private to the admin module).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogLevel {
    filter: String,
}

/// A sidecar and its control, as tlcd starts them from `FILE`.
fn control() -> Control {
    let layers = Layers::default();
    let resolved = layers
        .resolve_with(Some(FILE.to_string()))
        .expect("the file is valid");
    let sidecar = Arc::new(Sidecar::new(
        Policy::new(&resolved.config.policy).expect("its policy is valid"),
        resolved
            .config
            .sidecar_options()
            .expect("its bounds are valid"),
        None,
    ));
    let log = LogControl::detached(&resolved.config.log.level);
    Control::new(layers, resolved, sidecar, log)
}

/// Everything a change may touch, as text.
fn snapshot(control: &Control) -> [String; 5] {
    let current = control.current();
    let sidecar = control.sidecar();
    [
        serde_json::to_string(&current.config).expect("a config serializes"),
        format!("{:?}", current.sources),
        serde_json::to_string(sidecar.policy().settings()).expect("a policy serializes"),
        format!("{:?}", sidecar.table_limits()),
        control.log().filter(),
    ]
}

/// Applies a body as the handler of `endpoint` does; `None` when the body
/// is not JSON of the endpoint's shape (a 400 before `Control`).
fn apply(control: &Control, endpoint: u8, body: &[u8]) -> Option<Result<(), ControlError>> {
    Some(match endpoint % 3 {
        0 => {
            let patch: BTreeMap<String, Value> = serde_json::from_slice(body).ok()?;
            let changes = patch
                .into_iter()
                .map(|(k, v)| {
                    let change = if v.is_null() {
                        ApiChange::Remove
                    } else {
                        ApiChange::Set(v)
                    };
                    (k, change)
                })
                .collect();
            control.change(&changes).map(|_| ())
        }
        1 => {
            // As the handler reads it: the contract's request, then the
            // daemon's change.
            let request: PolicyRequest = serde_json::from_slice(body).ok()?;
            let change = PolicyChange::from(request);
            if let Ok(keys) = policy_change::keys_for(&change, &control.current().config) {
                assert!(!keys.is_empty());
                assert!(keys.keys().all(|k| k.starts_with("policy.")), "{keys:?}");
            }
            control.change_policy(&change).map(|_| ())
        }
        _ => {
            let level: LogLevel = serde_json::from_slice(body).ok()?;
            let changes =
                BTreeMap::from([("log.level".to_string(), ApiChange::Set(json!(level.filter)))]);
            control.change(&changes).map(|_| ())
        }
    })
}

/// A change known to be good, applied after the fuzzed one.
fn good_change(control: &Control) -> Arc<Resolved> {
    let changes = BTreeMap::from([("policy.min_bytes".to_string(), ApiChange::Set(json!(5000)))]);
    control.change(&changes).expect("a good change applies")
}

fuzz_target!(|input: &[u8]| {
    let Some((&endpoint, body)) = input.split_first() else {
        return;
    };
    let control = control();
    let before = snapshot(&control);
    let old = control.current().config.clone();
    let Some(result) = apply(&control, endpoint, body) else {
        return;
    };
    match result {
        Err(_) => {
            assert_eq!(
                snapshot(&control),
                before,
                "a refused change changed something"
            );
            let after = good_change(&control);
            let fresh = good_change(&self::control());
            assert_eq!(
                serde_json::to_string(&after.config).ok(),
                serde_json::to_string(&fresh.config).ok(),
                "a refused change stayed in the API layer"
            );
            assert_eq!(after.sources, fresh.sources);
        }
        Ok(()) => {
            let current = control.current();
            let config = &current.config;
            config.validate().expect("an accepted change is valid");
            let sidecar = control.sidecar();
            assert_eq!(sidecar.policy().settings(), &config.policy);
            assert_eq!(control.log().filter(), config.log.level);
            let options = config.sidecar_options().expect("valid bounds");
            assert_eq!(
                format!("{:?}", sidecar.table_limits()),
                format!("{:?}", options.push_limits)
            );
            assert_restart_only_kept(&old, config);
        }
    }
});

/// The keys fixed at start (`RESTART_ONLY` in `control`) did not move.
fn assert_restart_only_kept(old: &Config, new: &Config) {
    assert_eq!(old.routes, new.routes);
    assert_eq!(old.transparent, new.transparent);
    assert_eq!(old.admin, new.admin);
    assert_eq!(old.metrics, new.metrics);
    assert_eq!(old.log.format, new.log.format);
    assert_eq!(old.drain_seconds, new.drain_seconds);
    assert_eq!(old.contexts.pull_cache, new.contexts.pull_cache);
    assert_eq!(old.limits, new.limits);
    assert_eq!(old.contexts.fallback_mib, new.contexts.fallback_mib);
}
