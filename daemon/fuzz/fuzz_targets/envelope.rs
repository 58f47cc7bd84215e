//! A peer's envelope bytes, as the requesting sidecar reads them: parsed
//! with an element limit, decoded as a push (1 to 8 frames added up) and
//! applied as a pull to a replica that has a state. Must hold: no panic, no
//! decode beyond the limit, and a replica that refuses an envelope is left
//! as it was unless the error says it was dropped.
//!
//! The first byte chooses whether checksums are fixed up before parsing
//! (its low bit set): without that, almost every mutation of a seed fails
//! the header's or a frame's CRC-32C and the fuzzer never reaches the
//! checks behind it. Seeds: `cargo run --bin seed_envelope -- DIR`.

#![no_main]

use std::num::NonZeroU64;

use libfuzzer_sys::fuzz_target;
use tlc_codec::{Codec, Limits};
use tlc_daemon::context::pull::{ApplyError, PullSource, Replica};
use tlc_daemon::context::{decode_push, Envelope, Refinement};

const MAX_ELEMENTS: u64 = 1 << 16;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, data)) = input.split_first() else {
        return;
    };
    let mut data = data.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut data);
    }
    let data = &data[..];
    let limits = Limits {
        max_elements: MAX_ELEMENTS,
    };
    if let Ok(envelope) = Envelope::parse(data, &limits) {
        assert!(envelope.elements() <= MAX_ELEMENTS);
    }
    let mut values = Vec::new();
    if decode_push(data, &limits, &mut values).is_ok() {
        assert!(values.len() as u64 <= MAX_ELEMENTS);
    }
    // A replica at (epoch 1, version 1), as after a first keyframe, so a
    // chain from there is one the fuzzer can reach.
    let mut replica = Replica::new();
    let mut keyframe = Vec::new();
    let epoch = NonZeroU64::MIN;
    PullSource::new(epoch, 8)
        .serve(
            &[0.5; 8],
            None,
            Codec::None,
            Refinement::OFF,
            0,
            &mut keyframe,
        )
        .expect("a keyframe of 8 values");
    replica
        .apply(&keyframe, &limits)
        .expect("our own keyframe applies");
    let before = replica.replica_hash();
    match replica.apply(data, &limits) {
        Ok(values) => assert!(values.len() as u64 <= MAX_ELEMENTS),
        Err(ApplyError::Dropped { .. }) => assert_eq!(replica.state(), None),
        Err(_) => assert_eq!(replica.replica_hash(), before),
    }
});

/// Rewrites the envelope header's CRC and each frame's, walking frames by
/// the lengths their headers claim, as far as the bytes reach.
fn fix_checksums(data: &mut [u8]) {
    const HEADER_LEN: usize = 48;
    const CHECKED_LEN: usize = 44;
    const FRAME_FIXED: usize = 21;
    if data.len() < HEADER_LEN {
        return;
    }
    let crc = crc32c::crc32c(&data[..CHECKED_LEN]);
    data[CHECKED_LEN..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    let mut at = HEADER_LEN;
    while at + FRAME_FIXED <= data.len() {
        let payload =
            u32::from_le_bytes([data[at + 16], data[at + 17], data[at + 18], data[at + 19]]);
        let params = usize::from(data[at + 20]);
        let Some(end) = (at + FRAME_FIXED + params).checked_add(payload as usize) else {
            return;
        };
        if end + 4 > data.len() {
            return;
        }
        let crc = crc32c::crc32c(&data[at..end]);
        data[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        at = end + 4;
    }
}
