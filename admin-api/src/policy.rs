//! The compression policy's bodies: the policy as `/v1/status` shows it,
//! and the operator's shorthand for changing it (`POST /v1/policy`, what
//! `tlcctl set` sends).

use serde::{Deserialize, Serialize};
use serde_json::Number;
/// The directions a change applies to (the words the configuration file
/// uses too).
pub use tlc_core::Directions;

/// A codec as operators read it: its name and the parameter it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodecView {
    /// `3lc`, `topk`, `fp16`, `int8`, `none`, ...
    pub codec: String,
    /// 3LC's sparsity multiplier; present only for `3lc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f64>,
    /// Top-k's share of values kept, in percent; present only for `topk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<f64>,
}

/// The policy in force (`policy` of `/v1/status` and of
/// [`PolicyChanged`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    /// The codec of gradients workers send.
    pub push: CodecView,
    /// The codec of values workers fetch.
    pub pull: CodecView,
    /// Tensors smaller than this many bytes pass uncompressed.
    pub min_bytes: u64,
    /// How many per-tensor overrides there are.
    pub overrides: u64,
}

/// The body of `POST /v1/policy`. A field left out is not sent, so tlcd's
/// default applies; at least one of `codec`, `sparsity`, `k`, `skip` or
/// `min_bytes` must be given (tlcd judges the rest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    /// The directions it applies to (tlcd's default: both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Directions>,
    /// A glob over tensor names: put an override for it first instead of
    /// changing the direction's codec settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The codec's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codec: Option<String>,
    /// 3LC's sparsity multiplier, as the operator wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<Number>,
    /// Top-k's share in percent, as the operator wrote it (`5` stays an
    /// integer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<Number>,
    /// Send the tensors matching `tensor` uncompressed (overrides only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<bool>,
    /// The size threshold of both directions, in bytes (not with `tensor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<u64>,
}

/// The answer of `POST /v1/policy`: the configuration keys the change set
/// (`policy.push.sparsity`), and the policy now in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyChanged {
    /// Dotted configuration keys, sorted.
    pub changed: Vec<String>,
    /// The policy after the change.
    pub policy: PolicyView,
}
