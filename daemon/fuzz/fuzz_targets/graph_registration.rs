//! A peer's graph registration bytes, as the sidecar reads them on the way:
//! split into gRPC messages at arbitrary chunk boundaries, each read as a
//! `RegisterGraphRequest` and as an `EnqueueRequest` into one bounded
//! index. Must hold: no panic, the index never grows past its bound, and
//! every lookup answers. A splitter charged to a small in-flight budget
//! reads the same stream: whatever its prefixes declare, it never holds
//! more than one message of its limit and a chunk, what it holds is
//! charged, it gives up rather than pass the budget, and its charge comes
//! back when it goes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_proxy::limits::budget::MemoryBudget;
use tlc_sidecar::graph::tap::{MessageSplitter, GAVE_UP_MEMORY};
use tlc_sidecar::graph::GraphIndex;

const MAX_ENTRIES: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let index = GraphIndex::new(MAX_ENTRIES);
    let mut splitter = MessageSplitter::new(1 << 16);
    let chunk = usize::from(cut).max(1);
    let budget = MemoryBudget::new(32 << 10);
    let mut charged = MessageSplitter::charged(1 << 16, budget.clone());
    let mut plain_messages = 0usize;
    let mut charged_messages = 0usize;
    for piece in stream.chunks(chunk) {
        splitter.push(piece, |message| {
            plain_messages += 1;
            let _ = index.learn_register_graph(message);
            let _ = index.learn_enqueue(message);
        });
        charged.push(piece, |_| charged_messages += 1);
        assert!(charged.capacity() <= (1 << 16) + 5 + chunk);
        assert!(charged.held() <= charged.capacity());
        if charged.gave_up().is_none() {
            assert!(budget.in_use_bytes() >= charged.capacity() as u64);
            assert_eq!(charged_messages, plain_messages, "the budget only stops it");
        } else {
            assert_eq!(charged.capacity(), 0);
            assert_eq!(budget.in_use_bytes(), 0);
        }
    }
    if charged.gave_up().is_some() && splitter.gave_up().is_none() {
        assert_eq!(charged.gave_up(), Some(GAVE_UP_MEMORY));
    }
    drop(charged);
    assert_eq!(budget.in_use_bytes(), 0);
    // The whole input as one message too (no framing).
    let _ = index.learn_register_graph(stream);
    let _ = index.learn_enqueue(stream);
    assert!(index.len() <= MAX_ENTRIES);
    let _ = index.lookup(
        "/job:ps/replica:0/task:0",
        "/job:worker/replica:0/task:0",
        "edge_1_x",
    );
    let _ = index.class_counts();
});
