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
//! Raw and compressed calls of a tensor add up to what compressing every
//! call would give: the call after a lossy push carries its pending error
//! exactly, and a pull's replica is settled onto the model before the
//! first compressed call after raw ones (see [`payoff`]).

pub mod meter;
pub mod payoff;

pub use meter::{Answer, LinkMeter};
pub use payoff::{LinkNow, PayoffKey, PayoffView, Payoffs, Verdict};
