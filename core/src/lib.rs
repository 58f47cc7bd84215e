//! The ground floor of tlc: the words every other crate shares.
//!
//! Nothing here does I/O or knows HTTP, TensorFlow or a codec. It names
//! the two sidecars of a pair ([`Role`]), which way a tensor travels
//! ([`Direction`], and [`Directions`] for settings), what the graph says a tensor is ([`TensorClass`]), the
//! identity of one `RecvTensor` call ([`TensorCall`]) and the key it gives
//! every per-tensor table ([`TensorKey`]), how a call ended
//! ([`Outcome`], [`PassReason`]), the error every setting reports
//! ([`ConfigError`]) with the ranges of whole-number settings
//! ([`bounds`]), where tlcd keeps its private runtime files
//! ([`runtime_dir`]), and how an error and its causes make one line
//! ([`report`]).
//!
//! Every crate of the workspace may depend on this one; it depends on none
//! of them.

#![forbid(unsafe_code)]

pub mod bounds;
pub mod call;
pub mod class;
pub mod direction;
pub mod outcome;
pub mod report;
pub mod role;
pub mod runtime_dir;
pub mod settings;

pub use call::{TensorCall, TensorKey};
pub use class::TensorClass;
pub use direction::{Direction, Directions};
pub use outcome::{Outcome, PassReason};
pub use role::Role;
pub use settings::ConfigError;
