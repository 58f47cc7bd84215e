//! Lossless compression of everything two sidecars exchange that is not
//! an envelope: TensorFlow's control calls, integer tensors, small and
//! dead tensors ([`tlc_wire::hop`] is the format). It pays where a model
//! is not one big dense tensor: embedding ids and indices, rendezvous
//! keys and `RunGraph` calls repeat nearly identically every step.
//!
//! Who does what:
//!
//! - the requester's sidecar marks every call it sends with `tlc-hop` and
//!   restores the messages of an answer that comes back compressed
//!   ([`forward`]). Once a peer has answered with the mark, it also
//!   compresses the requests it sends that peer (up to [`MAX_REQUEST`]
//!   bytes, gathered whole), keeping the original: if the other end turns
//!   out to be TensorFlow itself (it refuses an unknown `grpc-encoding`
//!   before running anything), the call goes again as it came;
//! - the holder's sidecar restores a compressed request whole before
//!   anything reads it ([`restore_request`]), and compresses the messages
//!   of its answer to a marked call ([`compress_response`]);
//! - a small request is compressed against the previous one of the same
//!   call, which both sidecars keep ([`references`]), and names its method
//!   by a short path where the holder's sidecar says it restores them
//!   ([`tlc_wire::short_path`]: `h2` spells every `:path` out).
//!
//! Restoring is always on; compressing follows the policy
//! (`[policy] hop_compression`), so switching it off at either end never
//! strands a compressed message.
//!
//! What a peer sends is bounded ([`HopLimits`]): a body gathered whole is
//! charged to the in-flight budget as it arrives and must end within
//! `limits.gather_seconds` ([`gather`]); the holder refuses a compressed
//! request beyond either as TensorFlow refuses an encoding it does not
//! know, so the requester sends it again uncompressed and nothing is lost;
//! an answer restores to at most `limits.max_tensor_mib`, each restored
//! message charged until it is written toward TensorFlow ([`messages`]).
//! Refusals are counted and logged ([`refusals`]).

mod gather;
mod holder;
pub mod messages;
pub mod references;
pub mod refusals;
mod requester;

pub use holder::{compress_response, restore_request};
pub use refusals::{Refusal, RefusedTotals};
pub use requester::forward;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Request};
use tlc_proxy::limits::budget::MemoryBudget;
use tlc_wire::hop::Counted;

pub use messages::Mode;

/// Largest request gathered to be compressed (or restored): TensorFlow's
/// control requests are a few hundred bytes to a few KB; a larger one
/// (a graph registration) crosses as it is.
pub const MAX_REQUEST: usize = 64 << 10;

/// How long a peer that answered with the mark is trusted to restore
/// compressed requests without answering again.
const PEER_TTL: Duration = Duration::from_secs(300);

/// Peers remembered at most (a job's tasks; more only under attack).
const MAX_PEERS: usize = 4096;

const GRPC_ENCODING: &str = "grpc-encoding";

/// The holder's sidecar refused a compressed request it could not hold
/// (budget, time): the requester sends it again uncompressed and keeps
/// compressing to that peer. The refusal itself is TensorFlow's answer to
/// an unknown encoding, which a requester without this header copes with
/// too.
use tlc_wire::peer::HOP_AGAIN;

/// What bounds hop compression's memory and time (from `[limits]`).
#[derive(Debug, Clone)]
pub struct HopLimits {
    /// The in-flight budget: bodies gathered whole, restored messages
    /// until they are written toward TensorFlow.
    pub budget: MemoryBudget,
    /// How long a body gathered whole has to arrive.
    pub gather: Duration,
    /// Most bytes the messages of one answer may restore to.
    pub max_answer_bytes: u64,
    /// Bytes of memory each side's references may hold.
    pub references_bytes: usize,
}

/// Hop compression's counters, both ways.
#[derive(Debug, Default)]
pub struct HopCounters {
    compressed: [AtomicU64; 3],
    restored: [AtomicU64; 3],
    unshrunk: AtomicU64,
    failures: AtomicU64,
    resent: AtomicU64,
    reference_misses: AtomicU64,
    refusals: refusals::Refusals,
}

/// Hop compression's state on both sides.
#[derive(Debug)]
pub struct Hop {
    limits: HopLimits,
    /// Requester side: the peers that answered as sidecars lately.
    peers: Peers,
    /// Requester side: the request sent last per peer and call.
    sent: references::Sent,
    /// Holder side: the small requests each connection sent.
    held: references::Held,
}

/// What [`HopCounters`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HopTotals {
    /// Messages this sidecar compressed (raw = before, wire = after).
    pub compressed: Counted,
    /// Messages this sidecar restored (raw = after, wire = before).
    pub restored: Counted,
    /// Bytes of messages this sidecar would have compressed and sent as
    /// they came, since compressing did not make them smaller (float
    /// values, mostly: small tensors, and those an override skips).
    pub unshrunk_bytes: u64,
    /// Compressed messages or bodies that could not be restored.
    pub failures: u64,
    /// Compressed requests sent again as they came, because the other end
    /// was not a sidecar.
    pub resent: u64,
    /// Requests sent again without a reference the holder no longer held.
    pub reference_misses: u64,
    /// Calls refused rather than held beyond the limits, by why.
    pub refused: RefusedTotals,
}

impl Hop {
    /// Empty state within `limits`.
    pub fn new(limits: HopLimits) -> Hop {
        Hop {
            peers: Peers::default(),
            sent: references::Sent::new(limits.references_bytes),
            held: references::Held::new(limits.references_bytes),
            limits,
        }
    }
}

impl HopCounters {
    /// Counts one message of `raw` bytes compressed to `wire`.
    pub fn compressed(&self, raw: usize, wire: usize) {
        add(&self.compressed, raw, wire);
    }

    /// Counts one message of `bytes` sent as it came: compressing did not
    /// make it smaller.
    pub fn unshrunk(&self, bytes: usize) {
        self.unshrunk.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts one message of `wire` bytes restored to `raw`.
    pub fn restored(&self, raw: usize, wire: usize) {
        add(&self.restored, raw, wire);
    }

    fn count_compressed(&self, counted: Counted) {
        add_counted(&self.compressed, counted);
    }

    fn count_restored(&self, counted: Counted) {
        add_counted(&self.restored, counted);
    }

    fn reference_missed(&self) {
        self.reference_misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and logs (rate-limited) one call refused; `call` names it
    /// (its path, or the peer that answered).
    pub fn refused(&self, refusal: Refusal, call: &str, detail: &dyn std::fmt::Display) {
        self.refusals.refused(refusal, call, detail);
    }

    /// Counts one message or body that could not be restored.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything counted so far.
    pub fn totals(&self) -> HopTotals {
        let read = |c: &[AtomicU64; 3]| Counted {
            messages: c[0].load(Ordering::Relaxed),
            raw_bytes: c[1].load(Ordering::Relaxed),
            wire_bytes: c[2].load(Ordering::Relaxed),
        };
        HopTotals {
            compressed: read(&self.compressed),
            restored: read(&self.restored),
            unshrunk_bytes: self.unshrunk.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
            reference_misses: self.reference_misses.load(Ordering::Relaxed),
            refused: self.refusals.totals(),
        }
    }
}

fn add_counted(to: &[AtomicU64; 3], counted: Counted) {
    to[0].fetch_add(counted.messages, Ordering::Relaxed);
    to[1].fetch_add(counted.raw_bytes, Ordering::Relaxed);
    to[2].fetch_add(counted.wire_bytes, Ordering::Relaxed);
}

fn add(to: &[AtomicU64; 3], raw: usize, wire: usize) {
    to[0].fetch_add(1, Ordering::Relaxed);
    to[1].fetch_add(raw as u64, Ordering::Relaxed);
    to[2].fetch_add(wire as u64, Ordering::Relaxed);
}

/// The upstreams that answered as sidecars lately: when, and whether they
/// restore short method paths.
#[derive(Debug, Default)]
struct Peers {
    seen: Mutex<HashMap<SocketAddr, (Instant, bool)>>,
}

/// What a requester's sidecar knows of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Known {
    /// The peer answered as a sidecar lately.
    sidecar: bool,
    /// ... and said it restores short method paths.
    short_paths: bool,
}

impl Peers {
    fn knows(&self, addr: SocketAddr, now: Instant) -> Known {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (sidecar, short_paths) = seen
            .get(&addr)
            .filter(|(at, _)| now.saturating_duration_since(*at) < PEER_TTL)
            .map_or((false, false), |(_, short)| (true, *short));
        Known {
            sidecar,
            short_paths,
        }
    }

    /// Stops sending short paths to `addr` until it says again that it
    /// restores them.
    fn no_short_paths(&self, addr: SocketAddr) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, short)) = seen.get_mut(&addr) {
            *short = false;
        }
    }

    fn saw(&self, addr: SocketAddr, short_paths: bool, now: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= MAX_PEERS && !seen.contains_key(&addr) {
            seen.retain(|_, (at, _)| now.saturating_duration_since(*at) < PEER_TTL);
            if seen.len() >= MAX_PEERS {
                return;
            }
        }
        seen.insert(addr, (now, short_paths));
    }

    fn forget(&self, addr: SocketAddr) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr);
    }
}

/// Whether a call's messages are TensorFlow's own, uncompressed.
fn plain(headers: &HeaderMap) -> bool {
    headers.get(GRPC_ENCODING).is_none_or(|v| v == "identity")
}

/// The `grpc-status` a trailers-only answer carries in its head.
fn grpc_status_of(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get("grpc-status")
}

/// Replaces the path of `uri` with `path` (a method's full or short path,
/// `tlc_wire::short_path`); `uri` is left as it was if the result is not a
/// valid URI.
fn set_path(uri: &mut http::Uri, path: &'static str) -> Result<(), http::uri::InvalidUriParts> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static(path));
    *uri = http::Uri::from_parts(parts)?;
    Ok(())
}

/// A request head again, for sending a call a second time.
fn copy_head(parts: &http::request::Parts) -> http::request::Parts {
    let mut copy = Request::new(());
    *copy.method_mut() = parts.method.clone();
    *copy.uri_mut() = parts.uri.clone();
    *copy.version_mut() = parts.version;
    *copy.headers_mut() = parts.headers.clone();
    copy.headers_mut().remove(GRPC_ENCODING);
    copy.into_parts().0
}
