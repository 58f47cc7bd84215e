//! tlcd, the tlc sidecar, as a program: its configuration ([`config`]),
//! the operator's admin API ([`admin`]) and what it changes at run time
//! ([`control`]), the Prometheus endpoint ([`metrics`]), and what start-up
//! checks beyond the configuration ([`preflight`]). The binary
//! (`main.rs`) wires these to the proxy (`tlc_proxy`) and the sidecar
//! (`tlc_sidecar`); the data path lives in those crates, not here.
//!
//! Configuration sits on top: it reads the settings each crate below
//! defines (`PolicySettings`, `LimitSettings`, `TlsSettings`,
//! `RecoverySettings`) and builds what they configure; nothing below
//! imports it.

#![forbid(unsafe_code)]

pub mod admin;
pub mod config;
pub mod control;
pub mod metrics;
pub mod preflight;
