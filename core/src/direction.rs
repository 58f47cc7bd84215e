//! Which way a tensor travels between a worker and a parameter task.

use serde::{Deserialize, Serialize};

/// Which way a tensor travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// A gradient, from a worker to a parameter task (error feedback on the worker side).
    Push,
    /// A model value, from a parameter task to a worker (replicas and deltas).
    Pull,
}

impl Direction {
    /// `push` or `pull`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Push => "push",
            Direction::Pull => "pull",
        }
    }
}
