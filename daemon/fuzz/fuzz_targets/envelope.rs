//! A peer's envelope bytes, as the requesting sidecar reads them: parsed
//! with an element limit, decoded as a push (1 to 8 frames added up) and
//! applied as a pull to a replica that has a state. Must hold: no panic, no
//! decode beyond the limit, and a replica that refuses an envelope is left
//! as it was unless the error says it was dropped.

#![no_main]

use std::num::NonZeroU64;

use libfuzzer_sys::fuzz_target;
use tlc_codec::{Codec, Limits};
use tlc_daemon::context::pull::{ApplyError, PullSource, Replica};
use tlc_daemon::context::{decode_push, Envelope, Refinement};

const MAX_ELEMENTS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
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
        .serve(&[0.5; 8], None, Codec::None, Refinement::OFF, 0, &mut keyframe)
        .expect("a keyframe of 8 values");
    replica.apply(&keyframe, &limits).expect("our own keyframe applies");
    let before = replica.replica_hash();
    match replica.apply(data, &limits) {
        Ok(values) => assert!(values.len() as u64 <= MAX_ELEMENTS),
        Err(ApplyError::Dropped { .. }) => assert_eq!(replica.state(), None),
        Err(_) => assert_eq!(replica.replica_hash(), before),
    }
});
