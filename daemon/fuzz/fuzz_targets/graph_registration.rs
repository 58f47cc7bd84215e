//! A peer's graph registration bytes, as the sidecar reads them on the way:
//! split into gRPC messages at arbitrary chunk boundaries, each read as a
//! `RegisterGraphRequest` and as an `EnqueueRequest` into one bounded
//! index. Must hold: no panic, the index never grows past its bound, and
//! every lookup answers.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_sidecar::graph::tap::MessageSplitter;
use tlc_sidecar::graph::GraphIndex;

const MAX_ENTRIES: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let index = GraphIndex::new(MAX_ENTRIES);
    let mut splitter = MessageSplitter::new(1 << 16);
    let chunk = usize::from(cut).max(1);
    for piece in stream.chunks(chunk) {
        splitter.push(piece, |message| {
            let _ = index.learn_register_graph(message);
            let _ = index.learn_enqueue(message);
        });
    }
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
