//! The `[policy.refine]` table: how far 3LC's memory may lag behind the
//! tensors it stands for before another pass is sent (see
//! [`crate::context::refine`] for why and how).
//!
//! ```toml
//! [policy.refine]
//! pull_max_drift = 0.01      # replica within 1% (L2) of the model after an update
//! pull_max_passes = 8        # 3LC passes (versions) per update at most; 1 = off
//! push_max_error = 0.5       # error buffer at most 0.5x the gradient (L2) after a push
//! push_max_passes = 8        # frames per gradient at most (1..=8); 1 = off
//! push_gradients = "applied" # "applied": only gradients applied on arrival (async); "all"
//! ```

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::context::envelope::MAX_PUSH_FRAMES;
use crate::context::Refinement;

/// Which gradients get push refinement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PushGradients {
    /// Gradients the graph shows applied on arrival (`ApplyMomentum`,
    /// `AssignSubVariableOp`...): asynchronous training, where the error
    /// buffer's lag adds to staleness. Accumulated gradients (synchronous
    /// training) get 3LC's single pass.
    Applied,
    /// Every dense gradient.
    All,
}

/// The `[policy.refine]` table as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RefineSettings {
    /// Pulls: further passes while `‖V − R‖₂ / ‖V‖₂` is above this.
    pub pull_max_drift: f64,
    /// Pulls: passes per update at most, the first included (1 = off).
    pub pull_max_passes: u32,
    /// Pushes: further frames while `‖e‖₂ / ‖g‖₂` is above this.
    pub push_max_error: f64,
    /// Pushes: frames per gradient at most, the first included (1 = off).
    pub push_max_passes: u32,
    /// Which gradients get push refinement.
    pub push_gradients: PushGradients,
}

impl Default for RefineSettings {
    /// Measured on TensorFlow 2.21 jobs (README, "Refinement"): the TF1
    /// async MLP keeps its accuracy with these, synchronous jobs keep
    /// most of their ratio.
    fn default() -> Self {
        RefineSettings {
            pull_max_drift: 0.01,
            pull_max_passes: 8,
            push_max_error: 0.5,
            push_max_passes: 8,
            push_gradients: PushGradients::Applied,
        }
    }
}

/// Pass budgets above this are refused: each pass is a version to cache.
const MAX_PULL_PASSES: u32 = 16;

/// The validated table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refine {
    pull: Refinement,
    push: Refinement,
    push_gradients: PushGradients,
}

impl Refine {
    /// Validates the table, naming the first bad key.
    pub fn new(settings: &RefineSettings) -> Result<Refine, ConfigError> {
        let target = |key: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(value)
            } else {
                Err(invalid(key, value.to_string(), "a number above 0"))
            }
        };
        let passes = |key: &str, value: u32, max: u32| {
            if (1..=max).contains(&value) {
                Ok(value)
            } else {
                Err(invalid(
                    key,
                    value.to_string(),
                    &format!("1 to {max} (1 = off)"),
                ))
            }
        };
        Ok(Refine {
            pull: Refinement {
                target: target("policy.refine.pull_max_drift", settings.pull_max_drift)?,
                max_passes: passes(
                    "policy.refine.pull_max_passes",
                    settings.pull_max_passes,
                    MAX_PULL_PASSES,
                )?,
            },
            push: Refinement {
                target: target("policy.refine.push_max_error", settings.push_max_error)?,
                max_passes: passes(
                    "policy.refine.push_max_passes",
                    settings.push_max_passes,
                    MAX_PUSH_FRAMES,
                )?,
            },
            push_gradients: settings.push_gradients,
        })
    }

    /// The refinement of a pull replica's updates.
    pub fn pull(&self) -> Refinement {
        self.pull
    }

    /// The refinement of a dense gradient; `applied_on_arrival` is what
    /// the graph says of its consumer.
    pub fn push(&self, applied_on_arrival: bool) -> Refinement {
        match (self.push_gradients, applied_on_arrival) {
            (PushGradients::All, _) | (PushGradients::Applied, true) => self.push,
            (PushGradients::Applied, false) => Refinement::OFF,
        }
    }
}

fn invalid(key: &str, value: String, allowed: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value,
        allowed: allowed.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refine(toml_text: &str) -> Result<Refine, ConfigError> {
        let settings: RefineSettings = toml::from_str(toml_text).expect("test TOML parses");
        Refine::new(&settings)
    }

    #[test]
    fn defaults_refine_pulls_and_gradients_applied_on_arrival() {
        let r = refine("").unwrap();
        assert_eq!(
            r.pull(),
            Refinement {
                target: 0.01,
                max_passes: 8
            }
        );
        assert_eq!(
            r.push(true),
            Refinement {
                target: 0.5,
                max_passes: 8
            }
        );
        assert_eq!(r.push(false), Refinement::OFF);
        let all = refine("push_gradients = \"all\"\n").unwrap();
        assert_eq!(all.push(false), all.push(true));
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = refine("pull_max_passes = 0\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.refine.pull_max_passes = 0: 1 to 16 (1 = off)"
        );
        let err = refine("push_max_passes = 9\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.refine.push_max_passes = 9: 1 to 8 (1 = off)"
        );
        let err = refine("pull_max_drift = -0.1\n").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("policy.refine.pull_max_drift = -0.1"));
        let err = refine("push_max_error = nan\n").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("policy.refine.push_max_error = NaN"));
        assert!(toml::from_str::<RefineSettings>("push_gradients = \"some\"\n").is_err());
    }
}
