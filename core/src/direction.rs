//! Which way a tensor travels between a worker and a parameter task, and
//! which of the two ways a setting applies to.

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

/// The directions a setting applies to: a policy override in the file, or
/// a change through the admin API (`push`, `pull`, `both`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Directions {
    /// Gradients only.
    Push,
    /// Model values only.
    Pull,
    /// Both (the default).
    #[default]
    Both,
}

impl Directions {
    /// `push`, `pull` or `both`, as written.
    pub fn name(self) -> &'static str {
        match self {
            Directions::Push => "push",
            Directions::Pull => "pull",
            Directions::Both => "both",
        }
    }

    /// Whether `direction` is one of them.
    pub fn include(self, direction: Direction) -> bool {
        match self {
            Directions::Both => true,
            Directions::Push => direction == Direction::Push,
            Directions::Pull => direction == Direction::Pull,
        }
    }
}
