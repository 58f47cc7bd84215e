//! Arbitrary bytes as the frames a peer's sidecar sends in a session
//! (`tlc_proxy::mux::frame`): read one batch after another with one set of
//! header tables, as a session's reader does.
//!
//! Must hold: no panic; every head or tail read has at most 64 pairs and
//! 32 KiB of names and values; every frame read, written again with a
//! second set of tables and read back with a third, is the same frame (the
//! tables of both ends agree).
//! Seeds: frames the session's tests write (`daemon/fuzz`'s `seeds` binary).

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tlc_proxy::mux::frame::{Frame, Pairs, Tables, MAX_BLOCK_BYTES, MAX_PAIRS};

fn bounded(pairs: &Option<Pairs>) {
    if let Some(pairs) = pairs {
        assert!(pairs.len() <= MAX_PAIRS);
        let bytes: usize = pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(bytes <= MAX_BLOCK_BYTES);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut reader = Tables::default();
    let (mut writer, mut again) = (Tables::default(), Tables::default());
    let mut batch = Bytes::copy_from_slice(data);
    while !batch.is_empty() {
        let Ok(frame) = reader.read(&mut batch) else {
            return;
        };
        if let Frame::Call(_, part) = &frame {
            bounded(&part.head);
            bounded(&part.tail);
        }
        let mut written = BytesMut::new();
        writer.write(&frame, &mut written);
        let mut written = written.freeze();
        let back = again.read(&mut written).expect("a frame written reads back");
        assert!(written.is_empty());
        match (&frame, &back) {
            (Frame::Call(a, pa), Frame::Call(b, pb)) => {
                assert_eq!(a, b);
                assert_eq!((pa.end, pa.grpc, &pa.data), (pb.end, pb.grpc, &pb.data));
                let sorted = |p: &Option<Pairs>| {
                    p.clone().map(|mut p| {
                        p.sort();
                        p
                    })
                };
                assert_eq!(sorted(&pa.head), sorted(&pb.head));
                assert_eq!(sorted(&pa.tail), sorted(&pb.tail));
            }
            (a, b) => assert_eq!(a, b),
        }
    }
});
