//! The graph protobufs TensorFlow registers on remote tasks, as far as tlc
//! reads them ([`proto`]), and a builder of such registrations for tests
//! and the emulated job ([`build`]). What the sidecar learns from them is
//! the sidecar's business, not this module's.

pub mod build;
pub mod proto;
