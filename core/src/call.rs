//! The identity of one `RecvTensor` call: which tensor, between which two
//! tasks, which way.
//!
//! The two tasks are named by what they do with the tensor, the same way
//! in every key built from a call: the *holder* has it (the task the
//! request goes to, behind the inbound sidecar), the *requester* asks for
//! it (behind the outbound sidecar).

use crate::Direction;

/// What the sidecars need to know about one `RecvTensor` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorCall {
    /// The tensor's context name (the node part of the rendezvous name).
    pub tensor: String,
    /// The full rendezvous tensor name (`edge_12_w1/read`), as graphs name it.
    pub tensor_name: String,
    /// The task holding the tensor (`/job:ps/replica:0/task:0`).
    pub holder_task: String,
    /// The holding device's incarnation: a new one for each process of
    /// that task, so a restarted task (or a new job) is told apart.
    pub holder_incarnation: u64,
    /// The task asking for it.
    pub requester_task: String,
    /// Pull when the holder is a parameter task, else push.
    pub direction: Direction,
    /// The step the call belongs to (`RecvTensorRequest.step_id`): one
    /// value for every tensor of one step of one session, across tasks.
    pub step_id: i64,
}
