//! The identity of one `RecvTensor` call: which tensor, between which two
//! tasks, which way.
//!
//! The two tasks are named by what they do with the tensor, the same way
//! in every key built from a call: the *holder* has it (the task the
//! request goes to, behind the inbound sidecar), the *requester* asks for
//! it (behind the outbound sidecar). [`TensorKey`] is the one key every
//! table that keeps something per tensor is indexed by, made from a call.

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

impl TensorCall {
    /// The key of this call's tensor between its two tasks.
    pub fn key(&self) -> TensorKey {
        TensorKey {
            holder: self.holder_task.clone(),
            requester: self.requester_task.clone(),
            tensor: self.tensor.clone(),
        }
    }
}

/// Names one tensor between two tasks: the key of every table that keeps
/// something per tensor (an error buffer, a replica, a mirror of rows, a
/// class, a link decision). Made from a call ([`TensorCall::key`]). A
/// table that keeps one entry for all of a tensor's requesters (the
/// holder's pull source) or all of its holders (the workers' agreement a
/// parameter task measures) leaves that task empty
/// ([`TensorKey::for_every_requester`], [`TensorKey::for_every_holder`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorKey {
    /// The task holding the tensor (`/job:ps/replica:0/task:0`); empty in
    /// a key for every holder.
    pub holder: String,
    /// The task asking for it; empty in a key for every requester.
    pub requester: String,
    /// The tensor's context name (the node part of the rendezvous name:
    /// edge ids differ between workers, node names do not).
    pub tensor: String,
}

impl TensorKey {
    /// The key of `tensor` between `holder` and `requester`.
    pub fn new(holder: &str, requester: &str, tensor: &str) -> TensorKey {
        TensorKey {
            holder: holder.to_owned(),
            requester: requester.to_owned(),
            tensor: tensor.to_owned(),
        }
    }

    /// The same tensor and holder, for every requester.
    pub fn for_every_requester(mut self) -> TensorKey {
        self.requester.clear();
        self
    }

    /// The same tensor and requester, for every holder.
    pub fn for_every_holder(mut self) -> TensorKey {
        self.holder.clear();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_names_its_tensor_between_its_two_tasks() {
        let call = TensorCall {
            tensor: "w1".into(),
            tensor_name: "edge_12_w1/read".into(),
            holder_task: "/job:ps/replica:0/task:0".into(),
            holder_incarnation: 7,
            requester_task: "/job:worker/replica:0/task:1".into(),
            direction: Direction::Pull,
            step_id: 3,
        };
        let key = call.key();
        assert_eq!(
            key,
            TensorKey::new(
                "/job:ps/replica:0/task:0",
                "/job:worker/replica:0/task:1",
                "w1"
            )
        );
        let shared = key.clone().for_every_requester();
        assert_eq!(shared, TensorKey::new("/job:ps/replica:0/task:0", "", "w1"));
        assert_ne!(shared, key);
        assert_eq!(
            key.for_every_holder(),
            TensorKey::new("", "/job:worker/replica:0/task:1", "w1")
        );
    }
}
