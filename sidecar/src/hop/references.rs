//! References for compressing requests: the message a requester sent a
//! peer last for the same call, which the peer's sidecar also holds, used
//! as zstd's dictionary ([`tlc_wire::hop::compress_with`]).
//!
//! TensorFlow asks for the same tensors every step with requests that
//! differ only in their step and request ids: against the previous one, a
//! `RecvTensor` request shrinks from a few hundred bytes to a few dozen.
//!
//! - The holder's sidecar keeps every small request message a sidecar
//!   sent it ([`Held`]), by connection (a peer can never name another
//!   peer's message) and content id.
//! - The requester's sidecar remembers, per peer, method and tensor, the
//!   message it sent last that the holder's sidecar answered ([`Sent`]),
//!   and names it in `tlc-hop-ref`. A holder that no longer holds it
//!   answers `tlc-hop-miss` before anything reaches TensorFlow, and the
//!   call goes again without a reference.
//!
//! Both are bounded in bytes of memory, every entry counted at its real
//! size (`[limits] hop_references_mib`); what falls out costs one such
//! retry. Each side's references are spread over a few locks, and every
//! operation under a lock is constant time.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prost::Message;
use tlc_proxy::connection::ConnectionId;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::rendezvous::RendezvousKey;
use tlc_wire::tf::RECV_TENSOR_PATH;

/// Largest message kept as a reference: control requests are far smaller.
pub const MAX_REFERENCE: usize = 16 << 10;

/// Memory an entry takes besides its message (and, on the requester's
/// side, its key's strings), counted against the bound so that the bound
/// is what the process holds: the slot (key, value handle, links: 80
/// bytes), the map's entry at its worst load after a resize (about 60),
/// the message's allocation header and rounding (about 32), and room for
/// the slot vector's doubling. Measured: 140k distinct 50-byte messages
/// under an 8 MiB bound grow the resident memory by about the bound
/// (`daemon/tests/hostile_hop.rs`).
pub const ENTRY_OVERHEAD: usize = 256;

/// What a requester's key costs besides its strings: the shared key's
/// allocation (address, two string headers) and the strings' headers.
const KEY_OVERHEAD: usize = 160;

/// Locks each side's references are spread over, so that calls on
/// different connections or methods rarely wait for each other; each
/// holds a share of the bound.
const SHARDS: usize = 8;

/// The one message of a body that is exactly one uncompressed gRPC
/// message of at most [`MAX_REFERENCE`] bytes.
pub fn single_message(body: &[u8]) -> Option<&[u8]> {
    let (prefix, message) = body.split_at_checked(5)?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    (prefix[0] == 0 && len == message.len() && len <= MAX_REFERENCE).then_some(message)
}

/// Which earlier request a request is compared with: the same peer, the
/// same method and, for `RecvTensor`, the same tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SentKey {
    addr: SocketAddr,
    path: String,
    tensor: String,
}

impl SentKey {
    /// The key of `message`, a request to `addr` for `path`.
    pub fn of(addr: SocketAddr, path: &str, message: &[u8]) -> SentKey {
        let tensor = if path == RECV_TENSOR_PATH {
            RecvTensorRequest::decode(message)
                .ok()
                .and_then(|r| RendezvousKey::parse(&r.rendezvous_key).ok())
                .map(|k| k.tensor_name)
                .unwrap_or_default()
        } else {
            String::new()
        };
        SentKey {
            addr,
            path: path.to_owned(),
            tensor,
        }
    }
}

/// Requester side: the message sent last per [`SentKey`], with its id.
#[derive(Debug)]
pub struct Sent(Shards<Arc<SentKey>, (u64, Bytes)>);

impl Sent {
    /// References holding at most `max_bytes` of memory, all counted.
    pub fn new(max_bytes: usize) -> Sent {
        Sent(Shards::new(max_bytes))
    }

    /// The reference for a request of `key`: the id and bytes of the
    /// message sent last.
    pub fn get(&self, key: &SentKey) -> Option<(u64, Bytes)> {
        self.0.lock(self.0.shard_of(key)).get(key).cloned()
    }

    /// Remembers `message` as the one sent last for `key`.
    pub fn remember(&self, key: SentKey, message: Bytes) {
        let id = tlc_wire::hop::reference_id(&message);
        let size =
            message.len() + key.path.len() + key.tensor.len() + KEY_OVERHEAD + ENTRY_OVERHEAD;
        let shard = self.0.shard_of(&key);
        self.0
            .lock(shard)
            .insert(Arc::new(key), (id, message), size);
    }

    /// Forgets the reference of `key` (the holder no longer has it).
    pub fn forget(&self, key: &SentKey) {
        self.0.lock(self.0.shard_of(key)).remove(key);
    }
}

/// Holder side: the messages each connection's requests carried, by id.
#[derive(Debug)]
pub struct Held(Shards<(ConnectionId, u64), Bytes>);

impl Held {
    /// References holding at most `max_bytes` of memory, all counted.
    pub fn new(max_bytes: usize) -> Held {
        Held(Shards::new(max_bytes))
    }

    /// Keeps `message`, which came on `connection`, as a reference.
    pub fn keep(&self, connection: ConnectionId, message: &[u8]) {
        let id = tlc_wire::hop::reference_id(message);
        let size = message.len() + ENTRY_OVERHEAD;
        if size > self.0.max_per_shard {
            return;
        }
        // Copied out of the request's body, so that a kept message does
        // not hold the whole body it came in.
        let message = Bytes::copy_from_slice(message);
        self.0
            .lock(Held::shard(id))
            .insert((connection, id), message, size);
    }

    /// The message `id` that came on `connection`, if still kept.
    pub fn get(&self, connection: ConnectionId, id: u64) -> Option<Bytes> {
        self.0.lock(Held::shard(id)).get(&(connection, id)).cloned()
    }

    /// The id is a hash of the message already: its low bits spread.
    fn shard(id: u64) -> usize {
        (id % SHARDS as u64) as usize
    }
}

/// [`SHARDS`] bounded maps, each under its own lock, each with a share of
/// the bound.
#[derive(Debug)]
struct Shards<K, V> {
    shards: Vec<Mutex<Bounded<K, V>>>,
    max_per_shard: usize,
    hasher: RandomState,
}

impl<K: Clone + Eq + Hash, V> Shards<K, V> {
    fn new(max_bytes: usize) -> Self {
        let max_per_shard = max_bytes / SHARDS;
        Shards {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Bounded::new(max_per_shard)))
                .collect(),
            max_per_shard,
            hasher: RandomState::new(),
        }
    }

    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    fn lock(&self, shard: usize) -> std::sync::MutexGuard<'_, Bounded<K, V>> {
        // `shard` is always below SHARDS; the modulo keeps that obvious.
        self.shards[shard % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// No slot: the end of the list.
const NIL: usize = usize::MAX;

/// One entry, linked from the oldest insert to the newest.
#[derive(Debug)]
struct Slot<K, V> {
    key: K,
    value: V,
    size: usize,
    /// The entry inserted just before (towards the oldest).
    older: usize,
    /// The entry inserted just after (towards the newest).
    newer: usize,
}

/// A map bounded in bytes; the oldest insert goes first. Every operation
/// is constant time: entries live in a slab of slots linked in insertion
/// order, the map holds each one's slot.
#[derive(Debug)]
struct Bounded<K, V> {
    map: HashMap<K, usize>,
    slots: Vec<Option<Slot<K, V>>>,
    /// Slots emptied, to be used again before the slab grows.
    free: Vec<usize>,
    oldest: usize,
    newest: usize,
    bytes: usize,
    max: usize,
}

impl<K: Clone + Eq + Hash, V> Bounded<K, V> {
    fn new(max: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            oldest: NIL,
            newest: NIL,
            bytes: 0,
            max,
        }
    }

    fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let at = *self.map.get(key)?;
        self.slots.get(at)?.as_ref().map(|slot| &slot.value)
    }

    fn insert(&mut self, key: K, value: V, size: usize) {
        if size > self.max {
            return;
        }
        self.remove(&key);
        while self.bytes + size > self.max && self.oldest != NIL {
            self.take(self.oldest);
        }
        let slot = Slot {
            key: key.clone(),
            value,
            size,
            older: self.newest,
            newer: NIL,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at] = Some(slot);
                at
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        match self.slots.get_mut(self.newest).and_then(Option::as_mut) {
            Some(newest) => newest.newer = at,
            None => self.oldest = at,
        }
        self.newest = at;
        self.map.insert(key, at);
        self.bytes += size;
    }

    fn remove<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(&at) = self.map.get(key) {
            self.take(at);
        }
    }

    /// Unlinks the entry in slot `at` and frees the slot.
    fn take(&mut self, at: usize) {
        let Some(slot) = self.slots.get_mut(at).and_then(Option::take) else {
            return;
        };
        match self.slots.get_mut(slot.older).and_then(Option::as_mut) {
            Some(older) => older.newer = slot.newer,
            None => self.oldest = slot.newer,
        }
        match self.slots.get_mut(slot.newer).and_then(Option::as_mut) {
            Some(newer) => newer.older = slot.older,
            None => self.newest = slot.older,
        }
        self.map.remove(&slot.key);
        self.bytes -= slot.size;
        self.free.push(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_the_newest_within_its_bytes() {
        let mut map = Bounded::new(100);
        for i in 0..20u32 {
            map.insert(i, i, 10);
            assert!(map.bytes <= 100);
        }
        assert!(!map.map.contains_key(&9));
        assert!(map.map.contains_key(&10) && map.map.contains_key(&19));
        map.insert(15, 0, 10);
        assert_eq!(map.map.len(), 10);
        map.remove(&15);
        assert_eq!((map.map.len(), map.bytes), (9, 90));
        map.insert(99, 0, 1000);
        assert!(!map.map.contains_key(&99), "larger than the whole bound");
    }

    #[test]
    fn removing_from_the_middle_keeps_the_order_of_the_rest() {
        let mut map = Bounded::new(40);
        for i in 0..4u32 {
            map.insert(i, i, 10);
        }
        map.remove(&1);
        map.insert(2, 2, 10);
        // Oldest first now: 0, 3, 2; two more push out 0 and 3.
        map.insert(4, 4, 10);
        map.insert(5, 5, 10);
        map.insert(6, 6, 10);
        let mut kept: Vec<u32> = map.map.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, [2, 4, 5, 6]);
        assert_eq!(map.bytes, 40);
        assert!(map.slots.len() <= 5, "emptied slots are used again");
        for i in [2, 4, 5, 6] {
            map.remove(&i);
        }
        assert_eq!((map.oldest, map.newest, map.bytes), (NIL, NIL, 0));
    }

    #[test]
    fn every_entry_is_counted_at_its_real_size() {
        let held = Held::new(SHARDS * (ENTRY_OVERHEAD + 10) * 4);
        for i in 0..1000u64 {
            held.keep(ConnectionId(1), format!("{i:>10}").as_bytes());
        }
        let kept: usize = held
            .0
            .shards
            .iter()
            .map(|s| s.lock().unwrap().map.len())
            .sum();
        assert!(kept <= SHARDS * 4 && kept > 0, "{kept}");
        let sent = Sent::new(SHARDS * 4096);
        let addr = "10.0.0.1:1".parse().unwrap();
        for i in 0..1000 {
            let key = SentKey::of(addr, &format!("/x.Y/Z{i}"), b"m");
            sent.remember(key.clone(), Bytes::from_static(b"m"));
            assert!(sent.get(&key).is_some());
        }
        let bytes: usize = sent.0.shards.iter().map(|s| s.lock().unwrap().bytes).sum();
        assert!(bytes <= SHARDS * 4096);
    }

    #[test]
    fn references_are_kept_per_connection() {
        let held = Held::new(1 << 20);
        let message = b"a request".to_vec();
        held.keep(ConnectionId(1), &message);
        let id = tlc_wire::hop::reference_id(&message);
        assert_eq!(held.get(ConnectionId(1), id).as_deref(), Some(&message[..]));
        assert_eq!(held.get(ConnectionId(2), id), None);
    }

    #[test]
    fn single_messages_only() {
        assert_eq!(single_message(&[0, 0, 0, 0, 2, 7, 8]), Some(&[7u8, 8][..]));
        assert_eq!(single_message(&[1, 0, 0, 0, 2, 7, 8]), None);
        assert_eq!(single_message(&[0, 0, 0, 0, 1, 7, 8]), None);
        assert_eq!(single_message(&[0, 0, 0]), None);
    }
}
