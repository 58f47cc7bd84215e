//! Whether compressing a tensor pays on its link. Compressing costs the
//! codec's time at both ends and saves the link's time for the bytes it
//! removes; on a fast link (same host, same zone) the first is larger, and
//! a sidecar that compresses there makes training slower than no sidecar.
//!
//! - [`meter`]: the requester's side measures how fast each holder's
//!   answers arrive and what decoding costs it, and tells the holder in
//!   each request (`tlc-link`);
//! - [`payoff`]: the holder's side knows what compressing each tensor
//!   costs and saves, and decides per tensor and requester whether to send
//!   it compressed or as TensorFlow wrote it.
//!
//! The decision never touches what the tensor's memory means: a tensor
//! sent raw leaves its error buffer (a push) and the requester's replica
//! (a pull) as they were, and the next compressed call carries on from
//! them.

pub mod meter;
pub mod payoff;

pub use meter::{Answer, LinkMeter};
pub use payoff::{LinkNow, PayoffKey, PayoffView, Payoffs, Verdict};
