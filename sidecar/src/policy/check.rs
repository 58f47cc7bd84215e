//! The `[policy.check]` table: checks an operator turns on to find out
//! whether tlc changes a training run in a way it should not.
//!
//! ```toml
//! [policy.check]
//! mirror = false      # compare what TensorFlow gets with the holder's own account, every call
//! exact_at_call = 0   # the Nth call of each tensor from each requester crosses exactly (0: none)
//! ```
//!
//! `mirror`: the requester's sidecar asks (`tlc-mirror: 1`), the holder's
//! sidecar answers each envelope with the hash of the values the
//! requester should hand TensorFlow from it (for a pull, its own copy of
//! the replica after the call), and the requester compares it with the
//! hash of what it restored. A mismatch (replicas that went apart, a
//! decode that differs between the two processes) is logged as an error
//! and counted (`tlc_mirror_checks_total{result="mismatch"}`), and
//! TensorFlow gets the original tensor instead. It costs a pass over each
//! tensor on both sides (and a decode of each push on the holder), so it
//! is off by default; both sidecars need a build that knows it, and only
//! the requester's setting counts.
//!
//! `exact_at_call`: one call of each tensor crosses exactly through its
//! memory (a gradient with its error buffer, a pull with the replica made
//! the model), as a call that follows raw ones under `[policy.link] mode
//! = "auto"` does. Run against the same seed without it, it tells what
//! such a call alone does to a run.

use serde::{Deserialize, Serialize};

/// The `[policy.check]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckSettings {
    /// Compare, call by call, the hash of what the requester restores
    /// with the holder's.
    pub mirror: bool,
    /// The call (counted from 1, per tensor and requesting task, among
    /// the calls the policy compresses and the link decision does not
    /// send raw) that crosses exactly; 0 for none.
    pub exact_at_call: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_unknown_keys_refused() {
        assert_eq!(
            CheckSettings::default(),
            CheckSettings {
                mirror: false,
                exact_at_call: 0
            }
        );
        let parsed: CheckSettings = toml::from_str("mirror = true\nexact_at_call = 50").unwrap();
        assert!(parsed.mirror);
        assert_eq!(parsed.exact_at_call, 50);
        assert!(toml::from_str::<CheckSettings>("mirrors = true").is_err());
    }
}
