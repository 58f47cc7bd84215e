//! Training progress, as the step counter reads that cross the sidecars
//! show it, and what tlcd does when it goes back.
//!
//! TensorFlow recovers from a broken connection by rebuilding sessions.
//! Without a checkpoint, a rebuilt chief session runs the initialiser
//! again: the variables on the parameter tasks are re-initialised, the
//! global step returns to 0, and the job later "finishes successfully"
//! having trained from scratch. tlcd cannot stop TensorFlow doing that,
//! but every read of the global step crosses the sidecars, so they see it
//! go back, and fail the job with an error that names the cause (or warn,
//! if the operator chose so: `[recovery]`).
//!
//! - [`counter`]: which reads are of the step counter, and their values;
//! - [`watch`]: the values seen, the rule that tells a reset from a
//!   checkpoint restore, and the stall warning;
//! - [`bounded`]: the bounded map that keeps peers from growing it.
//!
//! The data path that feeds it is [`step_reads`]; `[recovery]` is
//! [`recovery`].

pub mod bounded;
pub mod counter;
pub mod recovery;
pub mod step_reads;
pub mod watch;

#[cfg(test)]
mod tests;

pub use watch::{Moment, StepRead, StepWatch, Verdict};
