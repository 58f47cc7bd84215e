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
//! Both are bounded; what falls out costs one such retry.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use prost::Message;
use tlc_proxy::connection::ConnectionId;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::rendezvous::RendezvousKey;
use tlc_wire::tf::RECV_TENSOR_PATH;

/// Largest message kept as a reference: control requests are far smaller.
pub const MAX_REFERENCE: usize = 16 << 10;

/// Bytes of references each side keeps at most.
const MAX_BYTES: usize = 8 << 20;

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
pub struct Sent(Mutex<Bounded<SentKey, (u64, Bytes)>>);

impl Default for Sent {
    fn default() -> Self {
        Sent(Mutex::new(Bounded::new(MAX_BYTES)))
    }
}

impl Sent {
    /// The reference for a request of `key`: the id and bytes of the
    /// message sent last.
    pub fn get(&self, key: &SentKey) -> Option<(u64, Bytes)> {
        lock(&self.0).map.get(key).cloned()
    }

    /// Remembers `message` as the one sent last for `key`.
    pub fn remember(&self, key: SentKey, message: Bytes) {
        let id = tlc_wire::hop::reference_id(&message);
        let size = message.len() + key.path.len() + key.tensor.len() + 64;
        lock(&self.0).insert(key, (id, message), size);
    }

    /// Forgets the reference of `key` (the holder no longer has it).
    pub fn forget(&self, key: &SentKey) {
        lock(&self.0).remove(key);
    }
}

/// Holder side: the messages each connection's requests carried, by id.
#[derive(Debug)]
pub struct Held(Mutex<Bounded<(ConnectionId, u64), Bytes>>);

impl Default for Held {
    fn default() -> Self {
        Held(Mutex::new(Bounded::new(MAX_BYTES)))
    }
}

impl Held {
    /// Keeps `message`, which came on `connection`, as a reference.
    pub fn keep(&self, connection: ConnectionId, message: &[u8]) {
        let id = tlc_wire::hop::reference_id(message);
        let size = message.len() + 64;
        lock(&self.0).insert((connection, id), Bytes::copy_from_slice(message), size);
    }

    /// The message `id` that came on `connection`, if still kept.
    pub fn get(&self, connection: ConnectionId, id: u64) -> Option<Bytes> {
        lock(&self.0).map.get(&(connection, id)).cloned()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A map bounded in bytes; the oldest insert goes first.
#[derive(Debug)]
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<(K, usize)>,
    bytes: usize,
    max: usize,
}

impl<K: Clone + Eq + Hash, V> Bounded<K, V> {
    fn new(max: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max,
        }
    }

    fn insert(&mut self, key: K, value: V, size: usize) {
        if size > self.max {
            return;
        }
        if self.map.contains_key(&key) {
            self.remove(&key);
        }
        while self.bytes + size > self.max {
            let Some((oldest, size)) = self.order.pop_front() else {
                break;
            };
            self.map.remove(&oldest);
            self.bytes -= size;
        }
        self.map.insert(key.clone(), value);
        self.order.push_back((key, size));
        self.bytes += size;
    }

    fn remove(&mut self, key: &K) {
        if self.map.remove(key).is_some() {
            if let Some(at) = self.order.iter().position(|(k, _)| k == key) {
                if let Some((_, size)) = self.order.remove(at) {
                    self.bytes -= size;
                }
            }
        }
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
    fn references_are_kept_per_connection() {
        let held = Held::default();
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
