//! The admin API's contract: the requests and responses tlcd serves and
//! tlcctl reads, and where the default token lives.
//!
//! `daemon/ADMIN-API.md` describes the API for people; this crate is the
//! same contract for the compiler. tlcd serializes these types and tlcctl
//! deserializes them, so a field renamed on one side is renamed on the
//! other, and `tests/examples.rs` checks every body against the examples
//! of ADMIN-API.md.
//!
//! - [`paths`]: the endpoints.
//! - [`health`], [`status`], [`config`], [`policy`], [`tensors`],
//!   [`log_level`], [`error`]: the bodies, one module per section of
//!   ADMIN-API.md.
//! - [`env`]: the environment variables that are tlcctl's, which tlcd
//!   leaves alone.
//! - [`runtime_dir`] and [`default_token`]: the per-user directory tlcd
//!   keeps its runtime files in, and the token file it writes there when
//!   `admin.token_file` is not set, which tlcctl reads.
//!
//! Response types do not refuse fields they do not know (a newer tlcd may
//! add some); request types do (a typo in a change must not be ignored).
//! Numbers on the wire are JSON numbers: the types use `f64` where tlcd
//! sends a fraction, whatever precision tlcd computes it in.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod default_token;
pub mod env;
pub mod error;
pub mod health;
pub mod log_level;
pub mod paths;
pub mod policy;
pub mod status;
pub mod tensors;

pub use tlc_core::runtime_dir;

pub use config::{ConfigPatch, ConfigView};
pub use error::ErrorBody;
pub use health::Ready;
pub use log_level::{LogLevel, SetLogLevel};
pub use policy::{CodecView, Directions, PolicyChanged, PolicyRequest, PolicyView};
pub use status::Status;
pub use tensors::{SortField, TensorRow, Tensors, TensorsQuery};
