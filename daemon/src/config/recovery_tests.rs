//! The `[recovery]` table read through the whole configuration.

use tlc_sidecar::training::recovery::OnModelReset;

use crate::config::layers::Layers;
use crate::config::Config;

#[test]
fn defaults_fail_and_warn_after_ten_minutes() {
    let config = Config::default();
    assert_eq!(config.recovery.on_model_reset, OnModelReset::Fail);
    assert_eq!(config.recovery.stall_warn_seconds, 600);
}

#[test]
fn set_by_file_and_environment() {
    let config =
        Config::from_toml("[recovery]\non_model_reset = \"warn\"\nstall_warn_seconds = 0\n")
            .unwrap();
    assert_eq!(config.recovery.on_model_reset, OnModelReset::Warn);
    assert_eq!(config.recovery.stall_warn_seconds, 0);
    let layers = Layers::with_env(&[
        ("TLC_RECOVERY__ON_MODEL_RESET", "warn"),
        ("TLC_RECOVERY__STALL_WARN_SECONDS", "120"),
    ]);
    let resolved = layers.resolve().unwrap();
    assert_eq!(resolved.config.recovery.on_model_reset, OnModelReset::Warn);
    assert_eq!(resolved.config.recovery.stall_warn_seconds, 120);
    assert_eq!(
        resolved.sources["recovery.on_model_reset"].to_string(),
        "env TLC_RECOVERY__ON_MODEL_RESET"
    );
}

#[test]
fn bad_values_name_the_key() {
    let err = Config::from_toml("[recovery]\non_model_reset = \"ignore\"\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration: \"ignore\" is not allowed: \"fail\" (end the job with an error \
         naming the cause) or \"warn\" (log the error and let the job go on) for key \
         `recovery.on_model_reset`"
    );
    let err = Config::from_toml("[recovery]\nstall_warn_seconds = 604801\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "recovery.stall_warn_seconds = 604801: 0 to 604800 (seconds, 7 days; 0: never)"
    );
}
