//! The per-user directory tlcd keeps its small runtime files in: the admin
//! token it makes ([`crate::admin::default_token`]) and the socket it
//! offers its listeners at ([`crate::handover`]). Its location is part of
//! the admin API's contract (tlcctl finds the token there), so it lives in
//! `tlc_admin_api::runtime_dir`; this module keeps the daemon's paths to it.

pub use tlc_admin_api::runtime_dir::*;
