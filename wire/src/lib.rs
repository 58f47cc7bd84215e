//! Every byte format tlc reads from or writes to a peer, as pure parsing
//! and building: no sockets, no async, no state.
//!
//! - [`tf`]: TensorFlow's wire format: gRPC framing, the `RecvTensor`
//!   messages, rendezvous keys and the exact layout TensorFlow's fast path
//!   reads;
//! - [`graph`]: the graph registrations (`RegisterGraph`, TF2 `Enqueue`)
//!   as protobufs;
//! - [`envelope`]: what one sidecar sends the other in place of a tensor
//!   (`ENVELOPE.md` beside this crate says it byte by byte);
//! - [`rows`]: the rows section of the rows envelopes (gathered rows and
//!   IndexedSlices values, with state per row id);
//! - [`peer`]: the `tlc-*` headers two sidecars exchange;
//! - [`negotiation`]: what the two sidecars of a `RecvTensor` call say in
//!   them, as one requester's [`negotiation::Ask`] and one holder's
//!   [`negotiation::Mark`];
//! - [`hop`]: lossless compression of the other messages between two
//!   sidecars;
//! - [`short_path`]: the short method paths two sidecars use between them.
//!
//! Each parser here reads a peer's bytes, so each has a fuzz target in
//! `wire/fuzz` and hostile-input tests.

#![forbid(unsafe_code)]

pub mod compact;
pub mod envelope;
pub mod graph;
pub mod hop;
pub mod negotiation;
pub mod peer;
pub mod rows;
pub mod short_path;
pub mod tf;

pub use envelope::{Envelope, EnvelopeError, EnvelopeHeader, Kind};
pub use rows::{ids_hash, RowsSection};
