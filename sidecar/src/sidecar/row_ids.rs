//! Row ids seen crossing, kept for the step they belong to.
//!
//! A worker sends a parameter task the ids of a lookup (or of a gradient's
//! rows) before the rows themselves cross; the graph pairs the two
//! ([`crate::graph::RowKeyed`]). Both sidecars see the ids: the worker's
//! serves them, the parameter task's receives them. Each keeps them here,
//! by the tasks, the ids' tensor name and the step, until the rows of the
//! same step come through and are encoded or restored by row id.
//!
//! Ids live a short while and within a byte bound: rows that find no ids
//! are simply sent without memory, as before.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long ids wait for their rows: a step's rows follow its ids within
/// the step.
const TTL: Duration = Duration::from_secs(60);

/// Names one tensor of ids of one step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdsKey {
    /// The worker that sent the ids.
    pub src_task: String,
    /// The parameter task they went to.
    pub dst_task: String,
    /// The ids' rendezvous tensor name.
    pub tensor_name: String,
    /// The step.
    pub step_id: i64,
}

/// Ids kept for their rows, within a byte bound.
#[derive(Debug)]
pub struct RowIds {
    inner: Mutex<Inner>,
    max_bytes: usize,
    /// Woken whenever ids are kept, for rows that arrived first.
    kept: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Inner {
    /// The ids, and whether the requester keeps them too (it asked for
    /// ids sent again by reference, `tlc-ids`).
    map: HashMap<IdsKey, (Arc<[i64]>, bool)>,
    /// Insertion order, for expiry and for the byte bound.
    order: VecDeque<(IdsKey, Instant)>,
    bytes: usize,
}

impl RowIds {
    /// An empty store holding at most `max_bytes` of ids.
    pub fn new(max_bytes: usize) -> RowIds {
        RowIds {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            kept: tokio::sync::Notify::new(),
        }
    }

    /// Keeps `ids` under `key`, dropping ids older than a minute and the
    /// oldest beyond the bound. Ids larger than the whole bound are not
    /// kept.
    pub fn keep(&self, key: IdsKey, ids: impl Into<Arc<[i64]>>, now: Instant) {
        self.insert(key, ids.into(), false, now);
    }

    /// Marks the ids under `key` as kept by the requester too, once they
    /// have gone to it in full: a later tensor of the step may name them
    /// instead of carrying them again
    /// ([`same_ids_in_step`](Self::same_ids_in_step)).
    pub fn share(&self, key: &IdsKey) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, shared)) = inner.map.get_mut(key) {
            *shared = true;
        }
    }

    fn insert(&self, key: IdsKey, ids: Arc<[i64]>, shared: bool, now: Instant) {
        let size = size_of(&key, ids.len());
        if size > self.max_bytes {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((oldest, at)) = inner.order.front() {
            let expired = now.saturating_duration_since(*at) > TTL;
            if !expired && inner.bytes + size <= self.max_bytes {
                break;
            }
            let oldest = oldest.clone();
            inner.order.pop_front();
            if let Some((gone, _)) = inner.map.remove(&oldest) {
                inner.bytes -= size_of(&oldest, gone.len());
            }
        }
        if let Some((replaced, _)) = inner.map.insert(key.clone(), (ids, shared)) {
            // The same ids twice (a retried call): the order keeps one entry.
            inner.bytes -= size_of(&key, replaced.len());
            inner.order.retain(|(k, _)| k != &key);
        }
        inner.bytes += size;
        inner.order.push_back((key, now));
        drop(inner);
        self.kept.notify_waiters();
    }

    /// The ids under `key`, waiting up to `patience` for them: a gradient's
    /// rows can overtake its indices, which cross as a call of their own
    /// on another stream.
    pub async fn wait_for(&self, key: &IdsKey, patience: Duration) -> Option<Arc<[i64]>> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let kept = self.kept.notified();
            if let Some(ids) = self.get(key) {
                return Some(ids);
            }
            if tokio::time::timeout_at(deadline, kept).await.is_err() {
                return self.get(key);
            }
        }
    }

    /// The name of another tensor of `key`'s step, sent by the same task
    /// to the same task and kept by the requester too, whose ids equal
    /// `ids` (a gradient's indices that are a reshape of the lookup ids):
    /// what a holder may send as a reference instead.
    pub fn same_ids_in_step(&self, key: &IdsKey, ids: &[i64]) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .map
            .iter()
            .find(|(k, (kept, shared))| {
                *shared
                    && k.step_id == key.step_id
                    && k.tensor_name != key.tensor_name
                    && k.src_task == key.src_task
                    && k.dst_task == key.dst_task
                    && kept[..] == *ids
            })
            .map(|(k, _)| k.tensor_name.clone())
    }

    /// The ids kept under `key`, if any.
    pub fn get(&self, key: &IdsKey) -> Option<Arc<[i64]>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.map.get(key).map(|(ids, _)| Arc::clone(ids))
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

/// What one entry costs: its ids and its key.
fn size_of(key: &IdsKey, ids: usize) -> usize {
    ids * 8 + key.src_task.len() + key.dst_task.len() + key.tensor_name.len() + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(step: i64) -> IdsKey {
        IdsKey {
            src_task: "/job:worker/replica:0/task:0".into(),
            dst_task: "/job:ps/replica:0/task:0".into(),
            tensor_name: "edge_54_embedding_lookup/DynamicPartition".into(),
            step_id: step,
        }
    }

    #[tokio::test]
    async fn rows_that_overtake_their_ids_wait_for_them() {
        let store = Arc::new(RowIds::new(4096));
        let waiting = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.wait_for(&key(7), Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        store.keep(key(7), vec![1, 2], Instant::now());
        assert_eq!(waiting.await.unwrap().as_deref(), Some(&[1, 2][..]));
        // Ids that never come: the wait ends.
        assert_eq!(
            store.wait_for(&key(8), Duration::from_millis(20)).await,
            None
        );
    }

    #[test]
    fn finds_equal_ids_of_the_step_the_requester_keeps() {
        let store = RowIds::new(4096);
        let now = Instant::now();
        let named = |name: &str, step| IdsKey {
            tensor_name: name.into(),
            ..key(step)
        };
        store.keep(named("ids", 1), vec![3, 1, 3], now);
        store.keep(named("unshared", 1), vec![5, 6], now);
        store.keep(named("ids", 2), vec![9], now);
        let grads = named("grad_indices", 1);
        assert_eq!(
            store.same_ids_in_step(&grads, &[3, 1, 3]),
            None,
            "not sent in full yet"
        );
        store.share(&named("ids", 1));
        store.share(&named("ids", 2));
        store.share(&named("never kept", 1));
        assert_eq!(
            store.same_ids_in_step(&grads, &[3, 1, 3]),
            Some("ids".into())
        );
        // Not other ids, not another step, not itself, not ids the
        // requester does not keep, not another requester's.
        assert_eq!(store.same_ids_in_step(&grads, &[3, 1]), None);
        assert_eq!(
            store.same_ids_in_step(&named("grad_indices", 2), &[3, 1, 3]),
            None
        );
        assert_eq!(store.same_ids_in_step(&named("ids", 1), &[3, 1, 3]), None);
        assert_eq!(store.same_ids_in_step(&grads, &[5, 6]), None);
        let elsewhere = IdsKey {
            dst_task: "/job:ps/replica:0/task:1".into(),
            ..grads
        };
        assert_eq!(store.same_ids_in_step(&elsewhere, &[3, 1, 3]), None);
    }

    #[test]
    fn keeps_ids_per_step_within_time_and_bytes() {
        let store = RowIds::new(4096);
        let t0 = Instant::now();
        store.keep(key(1), vec![1, 2, 3], t0);
        store.keep(key(2), vec![4, 5], t0);
        assert_eq!(store.get(&key(1)).as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(store.get(&key(2)).as_deref(), Some(&[4, 5][..]));
        assert_eq!(store.get(&key(3)), None);
        // The same key again replaces, without double counting.
        let before = store.bytes();
        store.keep(key(2), vec![6, 7], t0);
        assert_eq!(store.bytes(), before);
        // A minute later, a new entry pushes the old ones out.
        store.keep(key(3), vec![8], t0 + TTL + Duration::from_secs(1));
        assert_eq!(store.get(&key(1)), None);
        assert_eq!(store.get(&key(3)).as_deref(), Some(&[8][..]));
        // The byte bound: the oldest go first; too large is never kept.
        for step in 10..100 {
            store.keep(key(step), vec![0; 40], t0 + TTL + Duration::from_secs(2));
            assert!(store.bytes() <= 4096);
        }
        assert_eq!(store.get(&key(10)), None);
        assert!(store.get(&key(99)).is_some());
        store.keep(key(1000), vec![0; 1000], t0);
        assert_eq!(store.get(&key(1000)), None);
    }
}
