//! A map of at most a fixed number of entries, the one used longest ago
//! dropped for a new one: the step watch's keys come from peers (task
//! names, incarnations, node names), and a peer inventing them must not
//! grow tlcd's memory.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A map of at most `max` entries; using an entry makes it the newest.
#[derive(Debug)]
pub struct Bounded<K, V> {
    entries: HashMap<K, (V, u64)>,
    /// Keys by the tick of their last use, oldest first.
    order: BTreeMap<u64, K>,
    tick: u64,
    max: usize,
}

impl<K: Clone + Eq + Hash, V> Bounded<K, V> {
    /// An empty map of at most `max` entries (at least one).
    pub fn new(max: usize) -> Self {
        Bounded {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            max: max.max(1),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in no particular order (not made newer).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, (v, _))| (k, v))
    }

    /// The entry of `key`, made the newest, if there is one. `key` may be
    /// a borrowed form of `K` (a `&str` for a `String` key), so that a
    /// lookup allocates nothing.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.tick += 1;
        let tick = self.tick;
        let (value, used) = self.entries.get_mut(key)?;
        if let Some(k) = self.order.remove(used) {
            self.order.insert(tick, k);
        }
        *used = tick;
        Some(value)
    }

    /// The entry of `key`, made the newest; made by `make` if absent, the
    /// oldest entry dropped when the map is full.
    pub fn get_or_insert_with<Q>(&mut self, key: &Q, make: impl FnOnce() -> V) -> &mut V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if !self.entries.contains_key(key) {
            if self.entries.len() >= self.max {
                if let Some((_, oldest)) = self.order.pop_first() {
                    self.entries.remove::<K>(&oldest);
                }
            }
            self.tick += 1;
            let owned = key.to_owned();
            self.order.insert(self.tick, owned.clone());
            self.entries.insert(owned, (make(), self.tick));
        }
        // Present now; `get_mut` also makes it the newest.
        match self.get_mut(key) {
            Some(value) => value,
            None => unreachable!("an entry just inserted is present"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_used_longest_ago_goes() {
        let mut map = Bounded::new(2);
        *map.get_or_insert_with(&"a", || 1) += 0;
        *map.get_or_insert_with(&"b", || 2) += 0;
        // "a" used again: "b" is now the oldest.
        assert_eq!(map.get_mut(&"a").copied(), Some(1));
        map.get_or_insert_with(&"c", || 3);
        assert_eq!(map.len(), 2);
        assert!(map.get_mut(&"b").is_none());
        assert_eq!(map.get_mut(&"a").copied(), Some(1));
        assert_eq!(map.get_mut(&"c").copied(), Some(3));
        for i in 0..1000 {
            map.get_or_insert_with(&"x", || i);
        }
        assert_eq!(map.len(), 2);
        assert_eq!(map.order.len(), 2);
    }

    #[test]
    fn string_keys_are_looked_up_by_str() {
        let mut map: Bounded<String, u32> = Bounded::new(4);
        *map.get_or_insert_with("ps", || 1) += 1;
        *map.get_or_insert_with("ps", || 10) += 1;
        assert_eq!(map.get_mut("ps").copied(), Some(3));
        assert_eq!(map.get_mut("worker"), None);
        assert_eq!(map.len(), 1);
    }
}
