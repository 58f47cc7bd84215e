//! The configuration's bodies (`GET` and `PATCH /v1/config`,
//! `POST /v1/reload`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The answer of `GET /v1/config`, `PATCH /v1/config` and
/// `POST /v1/reload`: the effective configuration and where each value
/// came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigView {
    /// The configuration in the shape of the TOML file. Free-form here: its
    /// keys are tlcd's configuration, documented in the README, not this
    /// API's.
    pub config: Value,
    /// The origin of each leaf value (an array is one value), by dotted
    /// key: `default`, `file PATH`, `env NAME`, `flag --NAME` or `api`.
    pub sources: BTreeMap<String, String>,
}

/// The body of `PATCH /v1/config`: new values by dotted key
/// (`policy.push.sparsity`); `null` removes the key from the `api` layer.
pub type ConfigPatch = BTreeMap<String, Value>;
