//! The `[recovery]` table: what tlcd does when it sees TensorFlow recover
//! from a failure in a way that harms the training run (see
//! [`crate::training`]). Part of the daemon's configuration, which reads
//! it from the `[recovery]` table.

use serde::{Deserialize, Serialize};

use tlc_core::{bounds, ConfigError};

/// What tlcd does when the global step goes back to the model's start
/// mid-run: TensorFlow re-initialised the variables (a session rebuilt
/// after a broken connection, with no checkpoint to restore).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnModelReset {
    /// Answer the step counter's reads with `FAILED_PRECONDITION`, which
    /// ends the training script with an error naming the cause.
    Fail,
    /// Let the job go on training from scratch; log an error.
    Warn,
}

impl OnModelReset {
    /// `fail` or `warn`, as in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            OnModelReset::Fail => "fail",
            OnModelReset::Warn => "warn",
        }
    }
}

impl<'de> Deserialize<'de> for OnModelReset {
    /// Read by hand: serde's own error for an unknown variant does not say
    /// which values are allowed.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.as_str() {
            "fail" => Ok(OnModelReset::Fail),
            "warn" => Ok(OnModelReset::Warn),
            other => Err(serde::de::Error::custom(format!(
                "{other:?} is not allowed: \"fail\" (end the job with an error naming the cause) \
                 or \"warn\" (log the error and let the job go on)"
            ))),
        }
    }
}

/// The `[recovery]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecoverySettings {
    /// What to do when the model is re-initialised mid-run.
    pub on_model_reset: OnModelReset,
    /// Seconds without the global step advancing (after it advanced once)
    /// before a warning is logged; 0: never.
    pub stall_warn_seconds: u64,
    /// Seconds without the global step advancing after TensorFlow rebuilt
    /// a session before the calls in progress are failed; 0: never.
    pub stall_fail_seconds: u64,
}

impl Default for RecoverySettings {
    fn default() -> Self {
        RecoverySettings {
            // tlc's first rule: never let a run be harmed silently.
            on_model_reset: OnModelReset::Fail,
            stall_warn_seconds: 600,
            stall_fail_seconds: 300,
        }
    }
}

impl RecoverySettings {
    /// Checks the values the types alone do not constrain.
    pub fn validate(&self) -> Result<(), ConfigError> {
        bounds::STALL_WARN_SECONDS.check("recovery.stall_warn_seconds", self.stall_warn_seconds)?;
        bounds::STALL_WARN_SECONDS.check("recovery.stall_fail_seconds", self.stall_fail_seconds)
    }
}
