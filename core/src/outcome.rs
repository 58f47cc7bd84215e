//! How a `RecvTensor` call through a sidecar ended, and why a tensor was
//! left as it was.

/// How a `RecvTensor` call through the sidecar ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Inbound: the response left compressed.
    Compressed,
    /// Outbound: a compressed response was restored for TensorFlow.
    Restored,
    /// The response went through as TensorFlow (or the peer) sent it.
    Passed,
    /// Outbound: an envelope could not be used and the original response
    /// was fetched from the peer sidecar instead.
    Fallback,
    /// The caller got an error: one tlcd made, or one already visible in
    /// the response head (HTTP status, trailers-only gRPC error).
    Error,
}

impl Outcome {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Compressed => "compressed",
            Outcome::Restored => "restored",
            Outcome::Passed => "passed",
            Outcome::Fallback => "fallback",
            Outcome::Error => "error",
        }
    }
}

/// Why a tensor is left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassReason {
    /// Below `min_bytes`.
    Small,
    /// An override says `skip`, or the codec is `none`.
    Skipped,
}

impl PassReason {
    /// The label value: `small` or `policy_skip`.
    pub fn label(self) -> &'static str {
        match self {
            PassReason::Small => "small",
            PassReason::Skipped => "policy_skip",
        }
    }
}
