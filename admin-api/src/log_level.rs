//! The log filter's bodies (`GET` and `PUT /v1/log-level`).

use serde::{Deserialize, Serialize};

/// The answer of `GET` and `PUT /v1/log-level`: the filter in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLevel {
    /// A `RUST_LOG`-style filter: `info`, `info,tlc_sidecar::sidecar=debug`.
    pub filter: String,
}

/// The body of `PUT /v1/log-level`: the filter to put in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetLogLevel {
    /// A `RUST_LOG`-style filter; one that does not parse is `400`.
    pub filter: String,
}
