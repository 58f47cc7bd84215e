//! What tlcd may hold: the memory it may use in all and how that is shared
//! out ([`memory`]), the budget that calls in flight charge ([`budget`]),
//! and the `[limits]` table that sets them ([`settings`]).
//! Nothing here knows about calls or tensors; the proxy and the sidecar
//! take charges where they hold bytes.

pub mod budget;
pub mod memory;
pub mod settings;
