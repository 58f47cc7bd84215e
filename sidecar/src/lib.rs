//! The sidecar: what tlc does to the calls the proxy hands it.
//!
//! `RecvTensor` is where tensors travel, so it is the one method the
//! sidecar looks inside; every other call is forwarded as it is, its
//! messages compressed losslessly between two sidecars. The modules, from
//! the top down:
//!
//! - [`sidecar`]: the [`Sidecar`] itself, the proxy's
//!   [`Handler`](tlc_proxy::Handler): dispatch of each call, the holder side
//!   that compresses (`inbound`), the requester side that restores
//!   (`outbound`), fallbacks to the original response, and its counters;
//! - [`policy`]: which codec, if any, each tensor gets;
//! - [`link`]: whether compressing a tensor pays on its link;
//! - [`graph`]: what each tensor is, learned from the graphs TensorFlow
//!   registers as they pass;
//! - [`hop`]: lossless compression of every other message between two
//!   sidecars;
//! - [`training`]: the global step as TensorFlow reads it: progress, stalls,
//!   and a model that went back to its start;
//! - [`counters`]: the labelled Prometheus series the data path updates.
//!
//! The byte formats are `tlc_wire`'s, the per-tensor state
//! `tlc_context`'s, the HTTP/2 plumbing `tlc_proxy`'s.

#![forbid(unsafe_code)]

pub mod counters;
pub mod graph;
pub mod hop;
pub mod link;
pub mod policy;
pub mod sidecar;
pub mod training;

pub use sidecar::{Options, Sidecar};
