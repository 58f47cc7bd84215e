//! Mutual TLS between sidecars.

pub mod identity;
pub mod settings;

pub use identity::{IdentityPattern, PatternError, PeerIdentity, PeerPatterns};
pub use settings::{TlsMode, TlsSettings};
