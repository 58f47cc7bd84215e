//! Per-tensor contexts: the state two sidecars keep so that a tensor can
//! cross the network compressed. The envelope it crosses in is
//! `tlc_wire::envelope`.
//!
//! - [`contexts`]: the two doors, [`Contexts::encode`] and
//!   [`Contexts::restore`], over the tables below (rows included:
//!   [`Memory::Rows`]);
//! - [`push`]: gradients (error feedback on the worker side);
//! - [`pull`]: model values (a shared replica per tensor on the parameter
//!   side, one replica per holder and tensor on the worker side);
//! - [`rows`]: gathered embedding rows and IndexedSlices values, with state
//!   per row id (a mirror per requester for pulls, an error per row for
//!   pushes);
//! - [`refine`]: how far a context's memory may lag (further 3LC passes);
//! - [`regime`]: the fidelity controller, which tightens a push's lag
//!   bound while its stream is in a critical regime;
//! - [`table`]: keeps contexts bounded by age and memory.
//!
//! Pure logic: no sockets, no async, no global state; time is passed in.

#![forbid(unsafe_code)]

pub mod contexts;
pub mod pull;
pub mod push;
pub mod refine;
pub mod regime;
pub mod rows;
pub mod table;

pub use contexts::{
    ContextLimits, Contexts, EncodeRefused, Encoded, Encoding, Memory, RestoreError, Restored,
    RowCounters, RowKind, RowMemory, RowTables, RowsRefused,
};
pub use pull::{
    replica_hash, ApplyError, EpochGenerator, PullServed, PullSource, Reads, Replica, ReplicaState,
    ReplicaStore, Requester, ServeError,
};
pub use push::{decode_push, encode_stateless, PushContext, PushError};
pub use refine::{PassScale, Refinement};
pub use regime::agreement::{AgreementMeter, AgreementPool, Round};
pub use regime::{RegimeDetector, Regimes};
pub use rows::{restore_push, RowErrors, RowMirror, RowsApplied, RowsEncoded, RowsError, Uniques};
pub use table::{ContextMemory, ContextTable, TableLimits};
