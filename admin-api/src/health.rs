//! The readiness probe's body (`GET /readyz`).

use serde::{Deserialize, Serialize};

/// `GET /readyz`: `200 {"ready": true}` once every listener is bound,
/// `503 {"ready": false, "reasons": [...]}` before and while draining.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// Whether the sidecar serves traffic.
    pub ready: bool,
    /// Why not; absent (empty) when ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl Ready {
    /// Ready when there is no reason not to be.
    pub fn from_reasons(reasons: Vec<String>) -> Ready {
        Ready {
            ready: reasons.is_empty(),
            reasons,
        }
    }
}
