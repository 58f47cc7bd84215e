//! Rows by id in fixed-size slots, each remembering when it was last
//! touched, with the deterministic batch eviction both sides of a rows
//! pull apply (and a rows push's error buffer, by its step counter).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Rows of `dim` values keyed by id, at most `max_rows` of them once an
/// envelope's eviction has run.
#[derive(Debug, Clone)]
pub(crate) struct RowStore {
    dim: usize,
    max_rows: usize,
    /// id → slot.
    slots: IdMap<u32>,
    /// Slot `s` holds `values[s * dim .. (s + 1) * dim]`.
    values: Vec<f32>,
    /// The id in each slot (meaningless in a free one).
    ids: Vec<i64>,
    /// The clock (version or step) each slot was last touched at; 0 for a
    /// free slot (clocks start at 1).
    touched: Vec<u64>,
    /// Free slots, reused before the slot vectors grow.
    free: Vec<u32>,
    evictions: u64,
}

impl RowStore {
    /// An empty store.
    pub(crate) fn new(dim: usize, max_rows: usize) -> RowStore {
        RowStore {
            dim,
            max_rows,
            slots: IdMap::default(),
            values: Vec::new(),
            ids: Vec::new(),
            touched: Vec::new(),
            free: Vec::new(),
            evictions: 0,
        }
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Rows held.
    pub(crate) fn rows(&self) -> usize {
        self.slots.len()
    }

    /// Rows evicted so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Heap bytes: row values, the per-slot id and clock, the free list and
    /// the id map (key, value and a control byte per bucket).
    pub(crate) fn bytes(&self) -> usize {
        let map_entry = std::mem::size_of::<(i64, u32)>() + 1;
        4 * self.values.capacity()
            + 8 * self.ids.capacity()
            + 8 * self.touched.capacity()
            + 4 * self.free.capacity()
            + map_entry * self.slots.capacity()
    }

    /// The slot holding `id`, if any.
    pub(crate) fn get(&self, id: i64) -> Option<u32> {
        self.slots.get(&id).copied()
    }

    /// The row in `slot`.
    pub(crate) fn row(&self, slot: u32) -> &[f32] {
        let at = slot as usize * self.dim;
        &self.values[at..at + self.dim]
    }

    /// The row in `slot`, to change.
    pub(crate) fn row_mut(&mut self, slot: u32) -> &mut [f32] {
        let at = slot as usize * self.dim;
        &mut self.values[at..at + self.dim]
    }

    /// Marks `slot` as touched at `clock`.
    pub(crate) fn touch(&mut self, slot: u32, clock: u64) {
        self.touched[slot as usize] = clock;
    }

    /// Puts `id` (not held) in a slot touched at `clock`, with `row` as its
    /// values, and returns the slot.
    pub(crate) fn insert(&mut self, id: i64, clock: u64, row: &[f32]) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => {
                let s = slot as usize;
                self.ids[s] = id;
                self.touched[s] = clock;
                self.row_mut(slot).copy_from_slice(row);
                slot
            }
            None => {
                // At most max_rows slots (see `evict`), and max_rows fits
                // the u32 the rows section carries.
                let slot = u32::try_from(self.ids.len()).unwrap_or(u32::MAX);
                self.ids.push(id);
                self.touched.push(clock);
                self.values.extend_from_slice(row);
                slot
            }
        };
        self.slots.insert(id, slot);
        slot
    }

    /// The eviction of an envelope at `clock` whose `envelope_rows`
    /// distinct rows are touched at `clock`, run once the held ones are
    /// touched and before the `incoming` new ones are inserted (so that
    /// freed slots are reused and no more than `max_rows` slots ever
    /// exist). The outcome is that of evicting after inserting:
    ///
    /// if more than `max_rows` rows would be held, every row last touched
    /// before a threshold `T` goes, `T` the smallest clock such that the
    /// rows touched at `T` or later number at most `⌊0.9 · max_rows⌋`, or
    /// `clock` if that is smaller. The envelope's own rows are never
    /// evicted; rows touched at one clock stay or go together. Returns the
    /// number evicted. `versions` is scratch.
    pub(crate) fn evict(
        &mut self,
        clock: u64,
        incoming: usize,
        envelope_rows: usize,
        versions: &mut Vec<u64>,
    ) -> usize {
        if self.rows().saturating_add(incoming) <= self.max_rows {
            return 0;
        }
        let keep = self.max_rows.saturating_mul(9) / 10;
        // Rows touched before `clock` that may stay beside the envelope's.
        let keep_older = keep.saturating_sub(envelope_rows);
        versions.clear();
        versions.extend(
            self.touched
                .iter()
                .copied()
                .filter(|&t| t != 0 && t < clock),
        );
        let threshold = if keep_older == 0 {
            clock
        } else if versions.len() <= keep_older {
            // Cannot happen when over the bound (the older rows then
            // outnumber keep_older); nothing to evict.
            return 0;
        } else {
            // The (keep_older + 1)-th most recent clock among the older
            // rows: it and everything before go, everything after stays
            // (at most keep_older rows). Its value does not depend on the
            // order of `versions`.
            let (_, &mut newest_evicted, _) =
                versions.select_nth_unstable_by(keep_older, |a, b| b.cmp(a));
            newest_evicted + 1
        };
        let mut evicted = 0;
        for slot in 0..self.touched.len() {
            let t = self.touched[slot];
            if t != 0 && t < threshold {
                self.touched[slot] = 0;
                self.slots.remove(&self.ids[slot]);
                // Slots fit u32 (see `insert`).
                self.free.push(u32::try_from(slot).unwrap_or(u32::MAX));
                evicted += 1;
            }
        }
        self.evictions += evicted as u64;
        evicted
    }
}

/// A map keyed by row id, hashed with [`IdHash`].
pub(crate) type IdMap<V> = HashMap<i64, V, IdHash>;

/// Hashes row ids for [`IdMap`]s: one folded 64×64→128-bit multiply per
/// id, keyed by a per-map random seed. SipHash (the standard library's)
/// costs several times more per id, and a rows call does a few map
/// operations per id; the random seed keeps a peer that chooses the ids
/// from predicting which ones collide.
#[derive(Debug, Clone)]
pub(crate) struct IdHash {
    seed: u64,
}

impl Default for IdHash {
    /// A fresh random seed, from the standard library's randomly keyed
    /// hasher (no extra dependency, no system call after a thread's first).
    fn default() -> IdHash {
        IdHash {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x1d5_u64),
        }
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher { hash: self.seed }
    }
}

/// The [`Hasher`] of an [`IdHash`].
#[derive(Debug, Clone)]
pub(crate) struct IdHasher {
    hash: u64,
}

/// The odd 64-bit constant of the multiply (from PCG).
const MULTIPLIER: u64 = 0x5851_f42d_4c95_7f2d;

/// Both halves of the 128-bit product, folded: every input bit reaches
/// both the low bits (the bucket) and the high bits (the tag).
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.hash = folded_multiply(self.hash ^ value, MULTIPLIER);
    }

    fn write_i64(&mut self, value: i64) {
        self.write_u64(value as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}
