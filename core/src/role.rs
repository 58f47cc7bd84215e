//! The two sidecars of a pair, named once.
//!
//! A listener serves one side of a tensor's path. For a `RecvTensor` call
//! the inbound sidecar is the one beside the task that *holds* the tensor
//! (it encodes) and the outbound sidecar the one beside the task that
//! *requests* it (it decodes). Metrics label the same two as `holder` and
//! `requester`; [`Role::side_name`] gives that spelling.

use serde::{Deserialize, Serialize};

/// Which side of a tensor's path a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Next to the task that asks for tensors: calls from the local
    /// TensorFlow task go out through this listener to a remote peer. This
    /// side announces that it can decode and restores compressed responses.
    Outbound,
    /// Next to the task that holds tensors: calls from remote peers come in
    /// through this listener to the local TensorFlow task. This side
    /// compresses responses for peers that announced a sidecar.
    Inbound,
}

impl Role {
    /// `outbound` or `inbound`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Outbound => "outbound",
            Role::Inbound => "inbound",
        }
    }

    /// The same side named by what it does to a tensor: `holder` (inbound,
    /// it encodes) or `requester` (outbound, it decodes into its replica).
    pub fn side_name(self) -> &'static str {
        match self {
            Role::Inbound => "holder",
            Role::Outbound => "requester",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Role;

    #[test]
    fn names() {
        assert_eq!(Role::Inbound.name(), "inbound");
        assert_eq!(Role::Inbound.side_name(), "holder");
        assert_eq!(Role::Outbound.name(), "outbound");
        assert_eq!(Role::Outbound.side_name(), "requester");
    }
}
