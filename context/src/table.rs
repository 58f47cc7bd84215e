//! A bounded table of contexts: one entry per key (a tensor of a peer),
//! each behind its own lock, evicted by idle age and by a memory budget.
//!
//! The table's own lock is held only to find, insert or remove an entry;
//! the work on a context (encoding, applying a chain) happens under that
//! context's lock alone, so two tensors are encoded in parallel. An entry
//! whose [`Arc`] someone holds right now is in use and is never evicted;
//! the holder finishes with it and it goes at a later [`ContextTable::evict`].
//!
//! Lock order: table, then context — and only for contexts nobody else
//! holds, which makes that second lock uncontended. Code holding a context
//! lock may call the table; the table never waits for a context lock a
//! caller holds, so the two cannot deadlock.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What a context costs, for the table's memory budget.
pub trait ContextMemory {
    /// Heap bytes the context holds (buffers, caches), roughly.
    fn memory_bytes(&self) -> usize;
}

/// Bounds of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// Total [`ContextMemory::memory_bytes`] the table tries to stay under.
    pub max_bytes: usize,
    /// A context unused for longer than this is dropped.
    pub max_age: Duration,
}

/// Size of a table, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Number of contexts.
    pub contexts: usize,
    /// Sum of the contexts' memory, as last measured.
    pub memory_bytes: usize,
}

impl TableStats {
    /// Both tables' sizes together.
    pub fn and(self, other: TableStats) -> TableStats {
        TableStats {
            contexts: self.contexts + other.contexts,
            memory_bytes: self.memory_bytes + other.memory_bytes,
        }
    }
}

/// What one [`ContextTable::evict`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evicted {
    /// Contexts dropped for being idle longer than `max_age`.
    pub by_age: usize,
    /// Contexts dropped, least recently used first, to meet `max_bytes`.
    pub by_budget: usize,
    /// Their memory.
    pub bytes: usize,
    /// Contexts that would have gone but were in use.
    pub skipped_in_use: usize,
}

impl Evicted {
    /// Both evictions together.
    pub fn and(self, other: Evicted) -> Evicted {
        Evicted {
            by_age: self.by_age + other.by_age,
            by_budget: self.by_budget + other.by_budget,
            bytes: self.bytes + other.bytes,
            skipped_in_use: self.skipped_in_use + other.skipped_in_use,
        }
    }
}

/// One line of a listing (for the admin API).
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<K, S> {
    /// The context's key.
    pub key: K,
    /// Time since the context was last used.
    pub idle: Duration,
    /// Its memory, as last measured.
    pub memory_bytes: usize,
    /// Whatever summary the caller asked for.
    pub summary: S,
}

/// Locks a context. A panic while a context was locked is a bug, not a
/// reason to take the daemon down with it: the lock is taken anyway, and
/// the contexts of this module are written so that an update cut short
/// leaves them visibly reset rather than silently wrong.
pub fn lock<C>(context: &Mutex<C>) -> MutexGuard<'_, C> {
    context.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Entry<C> {
    context: Arc<Mutex<C>>,
    last_use: Instant,
    memory: usize,
}

impl<C> Entry<C> {
    /// Whether only the table holds the context. Asked under the table
    /// lock, and clones are made only under that lock, so the answer
    /// stays true while the table lock is held.
    fn idle(&self) -> bool {
        Arc::strong_count(&self.context) == 1
    }

    /// The context's memory: measured now if it is idle (nobody else holds
    /// the Arc, so the lock is free), else as last measured.
    fn measure(&mut self) -> usize
    where
        C: ContextMemory,
    {
        if self.idle() {
            self.memory = lock(&self.context).memory_bytes();
        }
        self.memory
    }
}

/// Contexts `C` by key `K`, bounded by age and memory.
pub struct ContextTable<K, C> {
    // Beside the map so that a live config change needs only `&self`.
    limits: Mutex<TableLimits>,
    entries: Mutex<HashMap<K, Entry<C>>>,
}

impl<K: Eq + Hash + Clone, C: ContextMemory> ContextTable<K, C> {
    /// An empty table.
    pub fn new(limits: TableLimits) -> ContextTable<K, C> {
        ContextTable {
            limits: Mutex::new(limits),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The table's bounds.
    pub fn limits(&self) -> TableLimits {
        *lock(&self.limits)
    }

    /// Changes the bounds; they apply from the next [`ContextTable::evict`].
    pub fn set_limits(&self, limits: TableLimits) {
        *lock(&self.limits) = limits;
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<K, Entry<C>>> {
        // The map is only changed by whole inserts and removes; a panic
        // elsewhere cannot leave it half-updated.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The context for `key`, if there is one; marks it used at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<Arc<Mutex<C>>> {
        let mut entries = self.entries();
        let entry = entries.get_mut(key)?;
        entry.last_use = entry.last_use.max(now);
        Some(Arc::clone(&entry.context))
    }

    /// The context for `key`, made with `make` if there is none; marks it
    /// used at `now`. Does not evict: call [`ContextTable::evict`] for that.
    pub fn get_or_insert_with(
        &self,
        key: &K,
        now: Instant,
        make: impl FnOnce() -> C,
    ) -> Arc<Mutex<C>> {
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(key) {
            entry.last_use = entry.last_use.max(now);
            return Arc::clone(&entry.context);
        }
        let context = make();
        let memory = context.memory_bytes();
        let context = Arc::new(Mutex::new(context));
        entries.insert(
            key.clone(),
            Entry {
                context: Arc::clone(&context),
                last_use: now,
                memory,
            },
        );
        context
    }

    /// Removes the context for `key` (whoever holds it keeps a working
    /// copy that no one else will see). Returns whether there was one.
    pub fn remove(&self, key: &K) -> bool {
        self.entries().remove(key).is_some()
    }

    /// The context for `key`, or a new one made with `make` if the table
    /// has room for `expected_bytes` more (what the context will hold once
    /// used: a context is small when made and grows on its first use).
    /// Room is made first by dropping the least recently used idle
    /// contexts; `None` if there is none to make, so that a peer inventing
    /// keys cannot grow the table past its bound between two evictions.
    pub fn get_or_insert_within(
        &self,
        key: &K,
        now: Instant,
        expected_bytes: usize,
        make: impl FnOnce() -> C,
    ) -> Option<Arc<Mutex<C>>> {
        let max_bytes = self.limits().max_bytes;
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(key) {
            entry.last_use = entry.last_use.max(now);
            return Some(Arc::clone(&entry.context));
        }
        let mut total: usize = entries.values().map(|e| e.memory).sum();
        if total.saturating_add(expected_bytes) > max_bytes {
            let mut by_age: Vec<(Instant, K)> = entries
                .iter()
                .filter(|(_, entry)| entry.idle())
                .map(|(key, entry)| (entry.last_use, key.clone()))
                .collect();
            by_age.sort_by_key(|(last_use, _)| *last_use);
            for (_, old) in by_age {
                if total.saturating_add(expected_bytes) <= max_bytes {
                    break;
                }
                if let Some(entry) = entries.remove(&old) {
                    total = total.saturating_sub(entry.memory);
                }
            }
            if total.saturating_add(expected_bytes) > max_bytes {
                return None;
            }
        }
        let context = make();
        let memory = context.memory_bytes().max(expected_bytes);
        let context = Arc::new(Mutex::new(context));
        entries.insert(
            key.clone(),
            Entry {
                context: Arc::clone(&context),
                last_use: now,
                memory,
            },
        );
        Some(context)
    }

    /// Number of contexts and their memory: measured now for contexts
    /// nobody holds, as last measured for those in use.
    pub fn stats(&self) -> TableStats {
        let mut entries = self.entries();
        let memory_bytes = entries.values_mut().map(Entry::measure).sum();
        TableStats {
            contexts: entries.len(),
            memory_bytes,
        }
    }

    /// Drops contexts idle for longer than `max_age`, then the least
    /// recently used ones until the memory is within `max_bytes`. Contexts
    /// in use are skipped (and their memory still counts). Measures the
    /// memory of every idle context on the way.
    pub fn evict(&self, now: Instant) -> Evicted {
        let limits = self.limits();
        let mut entries = self.entries();
        let mut evicted = Evicted::default();
        let max_age = limits.max_age;
        entries.retain(|_, entry| {
            if now.saturating_duration_since(entry.last_use) <= max_age {
                return true;
            }
            if !entry.idle() {
                evicted.skipped_in_use += 1;
                return true;
            }
            evicted.by_age += 1;
            evicted.bytes += entry.memory;
            false
        });
        let mut total = 0usize;
        for entry in entries.values_mut() {
            total = total.saturating_add(entry.measure());
        }
        if total <= limits.max_bytes {
            return evicted;
        }
        let mut by_age: Vec<(Instant, K)> = entries
            .iter()
            .map(|(key, entry)| (entry.last_use, key.clone()))
            .collect();
        by_age.sort_by_key(|(last_use, _)| *last_use);
        for (_, key) in by_age {
            if total <= limits.max_bytes {
                break;
            }
            let Some(entry) = entries.get(&key) else {
                continue;
            };
            if !entry.idle() {
                evicted.skipped_in_use += 1;
                continue;
            }
            let memory = entry.memory;
            entries.remove(&key);
            total -= memory;
            evicted.by_budget += 1;
            evicted.bytes += memory;
        }
        evicted
    }

    /// One [`Listing`] per context, with `summarize`'s view of each. Each
    /// context is locked in turn after the table lock is released, so a
    /// listing never stalls the table behind a busy context.
    pub fn snapshot<S>(
        &self,
        now: Instant,
        mut summarize: impl FnMut(&C) -> S,
    ) -> Vec<Listing<K, S>> {
        let handles: Vec<(K, Instant, usize, Arc<Mutex<C>>)> = self
            .entries()
            .iter()
            .map(|(key, e)| (key.clone(), e.last_use, e.memory, Arc::clone(&e.context)))
            .collect();
        handles
            .into_iter()
            .map(|(key, last_use, memory_bytes, context)| Listing {
                key,
                idle: now.saturating_duration_since(last_use),
                memory_bytes,
                summary: summarize(&lock(&context)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Blob(usize);

    impl ContextMemory for Blob {
        fn memory_bytes(&self) -> usize {
            self.0
        }
    }

    fn table(max_bytes: usize, max_age_s: u64) -> ContextTable<&'static str, Blob> {
        ContextTable::new(TableLimits {
            max_bytes,
            max_age: Duration::from_secs(max_age_s),
        })
    }

    fn keys(t: &ContextTable<&'static str, Blob>, now: Instant) -> Vec<&'static str> {
        let mut keys: Vec<_> = t.snapshot(now, |_| ()).into_iter().map(|l| l.key).collect();
        keys.sort();
        keys
    }

    #[test]
    fn get_or_insert_makes_once_and_shares() {
        let t = table(1000, 60);
        let now = Instant::now();
        let a = t.get_or_insert_with(&"a", now, || Blob(10));
        let again = t.get_or_insert_with(&"a", now, || panic!("made twice"));
        assert!(Arc::ptr_eq(&a, &again));
        assert!(t.get(&"b", now).is_none());
        assert_eq!(
            t.stats(),
            TableStats {
                contexts: 1,
                memory_bytes: 10
            }
        );
        assert!(t.remove(&"a"));
        assert!(!t.remove(&"a"));
        assert_eq!(t.stats(), TableStats::default());
    }

    #[test]
    fn inserting_beyond_the_budget_drops_the_oldest_idle_or_refuses() {
        let t = table(100, 60);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let held = t.get_or_insert_within(&"held", at(0), 40, || Blob(0));
        assert!(held.is_some());
        t.get_or_insert_within(&"old", at(1), 40, || Blob(0))
            .unwrap();
        // 40 + 40 + 40 > 100: the oldest idle one ("old") makes room.
        t.get_or_insert_within(&"new", at(2), 40, || Blob(0))
            .unwrap();
        assert_eq!(keys(&t, t0), ["held", "new"]);
        // An existing key is found whatever the budget.
        assert!(t
            .get_or_insert_within(&"new", at(3), 1000, || Blob(0))
            .is_some());
        // No room even after dropping every idle context: refused.
        assert!(t
            .get_or_insert_within(&"huge", at(4), 70, || Blob(0))
            .is_none());
        assert_eq!(keys(&t, t0), ["held"], "the idle one went trying");
        assert_eq!(t.stats().contexts, 1);
    }

    #[test]
    fn evicts_by_age() {
        let t = table(1000, 60);
        let t0 = Instant::now();
        t.get_or_insert_with(&"old", t0, || Blob(1));
        t.get_or_insert_with(&"used", t0, || Blob(1));
        t.get(&"used", t0 + Duration::from_secs(50));
        let e = t.evict(t0 + Duration::from_secs(61));
        assert_eq!(
            e,
            Evicted {
                by_age: 1,
                by_budget: 0,
                bytes: 1,
                skipped_in_use: 0
            }
        );
        assert_eq!(keys(&t, t0), ["used"]);
        // Exactly max_age idle is still young.
        assert_eq!(t.evict(t0 + Duration::from_secs(110)).by_age, 0);
        assert_eq!(t.evict(t0 + Duration::from_secs(111)).by_age, 1);
    }

    #[test]
    fn evicts_least_recently_used_to_meet_the_budget() {
        let t = table(25, 3600);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        t.get_or_insert_with(&"a", at(0), || Blob(10));
        t.get_or_insert_with(&"b", at(1), || Blob(10));
        t.get_or_insert_with(&"c", at(2), || Blob(10));
        t.get(&"a", at(3)); // a is now the most recent
        let e = t.evict(at(4));
        assert_eq!(
            e,
            Evicted {
                by_age: 0,
                by_budget: 1,
                bytes: 10,
                skipped_in_use: 0
            }
        );
        assert_eq!(keys(&t, at(4)), ["a", "c"]);
        assert_eq!(t.stats().memory_bytes, 20);
    }

    #[test]
    fn memory_is_remeasured_when_idle() {
        let t = table(15, 3600);
        let t0 = Instant::now();
        let a = t.get_or_insert_with(&"a", t0, || Blob(0));
        t.get_or_insert_with(&"b", t0 + Duration::from_secs(1), || Blob(10));
        lock(&a).0 = 10; // grew while in use
        assert_eq!(t.stats().memory_bytes, 10); // in use: as last measured
        drop(a);
        assert_eq!(t.stats().memory_bytes, 20); // measured once idle
        let e = t.evict(t0 + Duration::from_secs(2));
        assert_eq!(e.by_budget, 1);
        assert_eq!(keys(&t, t0), ["b"]);
    }

    #[test]
    fn in_use_contexts_are_never_evicted() {
        let t = table(5, 60);
        let t0 = Instant::now();
        let held_old = t.get_or_insert_with(&"old", t0, || Blob(10));
        let held_big = t.get_or_insert_with(&"big", t0 + Duration::from_secs(100), || Blob(10));
        t.get_or_insert_with(&"free", t0 + Duration::from_secs(100), || Blob(10));
        let e = t.evict(t0 + Duration::from_secs(101));
        // "old" is too old and "big" is over budget, but both are held.
        assert_eq!(e.by_age, 0);
        assert_eq!(e.by_budget, 1);
        assert_eq!(e.skipped_in_use, 3);
        assert_eq!(keys(&t, t0), ["big", "old"]);
        drop((held_old, held_big));
        let e = t.evict(t0 + Duration::from_secs(102));
        assert_eq!((e.by_age, e.by_budget), (1, 1));
        assert_eq!(t.stats().contexts, 0);
    }

    #[test]
    fn snapshot_lists_and_summarizes() {
        let t = table(100, 60);
        let t0 = Instant::now();
        t.get_or_insert_with(&"a", t0, || Blob(7));
        let list = t.snapshot(t0 + Duration::from_secs(3), |b| b.0 * 2);
        assert_eq!(
            list,
            [Listing {
                key: "a",
                idle: Duration::from_secs(3),
                memory_bytes: 7,
                summary: 14
            }]
        );
    }

    #[test]
    fn time_going_backwards_is_harmless() {
        let t = table(100, 60);
        let t0 = Instant::now() + Duration::from_secs(10);
        t.get_or_insert_with(&"a", t0, || Blob(1));
        t.get(&"a", t0 - Duration::from_secs(5));
        assert_eq!(t.evict(t0 - Duration::from_secs(10)), Evicted::default());
        assert_eq!(
            t.snapshot(t0 - Duration::from_secs(10), |_| ())[0].idle,
            Duration::ZERO
        );
    }
}
