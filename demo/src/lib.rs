//! `tlc-demo`: an emulated TensorFlow parameter-server job, trained twice
//! through sidecars over rate-limited links — once uncompressed, once with
//! 3LC — to show what compression does to traffic, step time and accuracy.
//!
//! The job speaks TensorFlow's own `RecvTensor` wire format over h2c, in
//! TensorFlow's call directions (a worker asks the parameter task for each
//! variable, the parameter task asks each worker for each gradient), with
//! real-looking rendezvous keys, synchronous steps, and a real model
//! trained in plain Rust. Follow one run:
//!
//! - [`data`]: the generated examples, shards and mini-batches;
//! - [`model`]: the network and its optimizer;
//! - [`graph`]: the names TensorFlow would give tasks, variables, edges and keys;
//! - [`wire`]: `RecvTensor` client and server over hyper;
//! - [`ps`] and [`worker`]: the two kinds of task and their step loops;
//! - [`link`]: the rate-limited network between pods;
//! - [`accept`]: the listener loop the relays and servers share;
//! - [`pods`]: one sidecar and one link per task, wired together;
//! - [`run`]: one run of the job, start to end;
//! - [`options`]: what a run is made of;
//! - [`report`]: what the two runs did, as a table or JSON; [`cli`]: the
//!   `tlc-demo` command.
//!
//! The daemon's tests use the same pieces as a fake TensorFlow ([`wire`],
//! [`graph`], [`pods`]). The production sidecar never links this crate.

#![forbid(unsafe_code)]

pub mod accept;
pub mod cli;
pub mod data;
pub mod graph;
pub mod link;
pub mod model;
pub mod options;
pub mod pods;
pub mod ps;
pub mod report;
pub mod run;
pub mod wire;
pub mod worker;

pub use options::{Compression, DemoOptions};
pub use report::DemoReport;
pub use run::{run_demo, run_job};
