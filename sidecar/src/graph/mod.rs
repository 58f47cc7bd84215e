//! Learning what each tensor is from the graphs TensorFlow registers.
//!
//! TF1 masters send each task its partition of the graph
//! (`RegisterGraph`); TF2 clients register functions and the components of
//! multi-device functions on remote tasks (`EagerService/Enqueue`). Both
//! pass through the sidecars on their way, and both name every tensor that
//! will cross tasks by the same `tensor_name` its `RecvTensor` request will
//! carry. So the sidecar reads them as they pass ([`tap`]), classifies each
//! cross-task tensor from the ops around it ([`classify`]) and keeps the
//! answer ([`index`]) for the data path, which gives error feedback and
//! replicas only to tensors a graph showed to be dense.
//!
//! - the protobuf messages are `tlc_wire::graph::proto`;
//! - [`classify`]: one graph or function body to classes;
//! - [`index`]: what was learned, bounded, looked up per call;
//! - [`training`]: per parameter task, synchronous or asynchronous updates;
//! - [`tap`]: reads registrations out of a request body as it streams.

pub mod classify;
pub mod index;
pub mod tap;
pub mod training;

pub use classify::{Classified, RendezvousTensor, RowKeyed, RowRole, TensorClass};
pub use index::GraphIndex;
pub use training::Training;
