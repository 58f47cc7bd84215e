//! Why a call crosses as TensorFlow sent it: every reason the sidecar
//! passes a call through, in one enum, and the label each is counted under
//! (`tlc_passthrough_total{reason}`, `tlcctl status`). The labels are the
//! metric's contract: dashboards and alerts name them.

use tlc_context::EncodeRefused;
use tlc_wire::tf::recv_tensor::PassReason as Uncarried;

/// Why a call, or its tensor, crosses unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum PassReason {
    /// The request could not be read as a `RecvTensor` call.
    RequestUnreadable,
    /// A graph registration the index could not read (its tensors stay
    /// unclassified).
    GraphUnread,
    /// The policy leaves the tensor alone: below `min_bytes`, or skipped.
    Policy(tlc_core::PassReason),
    /// The link is fast enough that compressing costs more than it saves.
    LinkFast,
    /// The link decision sends a call raw to measure the link.
    LinkExplore,
    /// Larger than the requester decodes or this side reads whole.
    TooLarge,
    /// The in-flight budget cannot hold the response and its encoding.
    MemoryBudget,
    /// TensorFlow's response is not one gRPC message.
    GrpcFraming,
    /// TensorFlow's response is not a `RecvTensorResponse`.
    UnparsableResponse,
    /// The tensor is not one 3LC carries without loss of its other fields
    /// (dead, not float, values in typed fields...).
    Tensor(Uncarried),
    /// The tensor is warming up (`[policy] warmup_steps`) with no codec.
    Warmup,
    /// The tensor's context refused it (its budget, or the codec).
    Refused(EncodeRefused),
    /// The compressed response could not be built.
    RebuildFailed,
}

impl PassReason {
    /// The label it is counted under.
    pub fn label(&self) -> &'static str {
        match self {
            PassReason::RequestUnreadable => "request_unreadable",
            PassReason::GraphUnread => "graph_unread",
            PassReason::Policy(reason) => reason.label(),
            PassReason::LinkFast => "link_fast",
            PassReason::LinkExplore => "link_explore",
            PassReason::TooLarge => "too_large",
            PassReason::MemoryBudget => "memory_budget",
            PassReason::GrpcFraming => "grpc_framing",
            PassReason::UnparsableResponse => "unparsable_response",
            PassReason::Tensor(reason) => reason.label(),
            PassReason::Warmup => "warmup",
            PassReason::Refused(refused) => refused.label(),
            PassReason::RebuildFailed => "rebuild_failed",
        }
    }

    /// Whether the operator must hear of its first occurrence: a tensor
    /// too large to compress is usually the one that matters most.
    pub fn is_loud(&self) -> bool {
        matches!(self, PassReason::TooLarge)
    }
}

impl std::fmt::Display for PassReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_label() {
        let reasons = [
            PassReason::RequestUnreadable,
            PassReason::GraphUnread,
            PassReason::Policy(tlc_core::PassReason::Small),
            PassReason::Policy(tlc_core::PassReason::Skipped),
            PassReason::LinkFast,
            PassReason::LinkExplore,
            PassReason::TooLarge,
            PassReason::MemoryBudget,
            PassReason::GrpcFraming,
            PassReason::UnparsableResponse,
            PassReason::Tensor(Uncarried::Dead),
            PassReason::Warmup,
            PassReason::Refused(EncodeRefused::Budget),
            PassReason::Refused(EncodeRefused::Codec),
            PassReason::RebuildFailed,
        ];
        let mut labels: Vec<&str> = reasons.iter().map(PassReason::label).collect();
        assert!(labels
            .iter()
            .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        labels.sort_unstable();
        let before = labels.len();
        labels.dedup();
        assert_eq!(labels.len(), before, "labels are distinct");
        assert_eq!(
            PassReason::Policy(tlc_core::PassReason::Skipped).label(),
            "policy_skip"
        );
        assert!(PassReason::TooLarge.is_loud() && !PassReason::MemoryBudget.is_loud());
    }
}
