//! What the stages of one call (`call.rs`) hand each other: one
//! struct per call, in place of markers put on a response for a later
//! stage to find.

use tlc_core::Role;

/// What one call's stages learn that a later stage needs.
#[derive(Debug, Clone, Copy)]
pub struct CallState {
    /// The listener the call came on.
    pub role: Role,
    /// The caller is a sidecar that restores hop-compressed answers (hop
    /// restore, for the hop compress stage).
    pub hop_peer: bool,
    /// The answer's body already holds its charge to the in-flight budget
    /// (the holder side read it whole): the memory charge stage must not
    /// charge it again, or calls holding charges could wait on each other
    /// for more.
    pub charged: bool,
    /// The answer crosses as TensorFlow sent it, hop compression included:
    /// a float tensor sent raw because its link is fast, where zstd over
    /// float bytes would cost more than it saves (the link decision).
    pub leave_as_is: bool,
}

impl CallState {
    /// A call arriving on a listener of `role`, nothing learnt yet.
    pub fn new(role: Role) -> CallState {
        CallState {
            role,
            hop_peer: false,
            charged: false,
            leave_as_is: false,
        }
    }
}
