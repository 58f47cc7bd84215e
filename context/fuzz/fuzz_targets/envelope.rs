//! A peer's envelope bytes, as the requesting sidecar reads them
//! (`sidecar/requester.rs`, `prepare` and `restore`): the response declares
//! a shape; a shape beyond this sidecar's `limits.max_tensor_mib` is
//! refused before anything is decoded, and the element limit of the decode
//! is exactly the declared element count. Then the envelope is parsed,
//! decoded as a push (1 to 8 frames added up) and applied as a pull to a
//! replica that has a state.
//!
//! Must hold: no panic; nothing decoded beyond the declared elements; no
//! more memory held at once than a small multiple of the declared tensor
//! and of the input (a counting allocator measures it), so a small
//! envelope that declares a large tensor cannot make the sidecar allocate
//! it; a replica that refuses an envelope is left as it was unless the
//! error says it was dropped.
//!
//! The limits are the daemon's own (`LimitSettings::limits` of
//! `memory_mib = 64`, `max_tensor_mib = 1`: 1 MiB, 262144 values, written
//! here as the number). Input:
//! a mode byte, the declared element count (u32, little-endian: a shape of
//! one dimension), then the envelope. With the mode's low bit set the
//! envelope's and every frame's CRC-32C are rewritten before parsing, so
//! that mutations get past the checksums to the checks behind them.
//! Seeds: `daemon/fuzz`'s `seeds` binary.

#![no_main]

mod counting;
mod reseal;

use std::num::NonZeroU64;

use counting::measure;
use libfuzzer_sys::fuzz_target;
use reseal::{seal_frames, seal, HEADER_CHECKED};
use tlc_codec::{Codec, Limits};
use tlc_context::pull::{ApplyError, PullSource, Replica};
use tlc_context::{decode_push, Refinement};
use tlc_wire::envelope::{Envelope, HEADER_LEN};

/// The largest tensor content this sidecar decodes, in bytes, from its
/// config as tlcd computes it.
fn max_tensor_bytes() -> u64 {
    // `limits.max_tensor_mib = 1` under `limits.memory_mib = 64` (its
    // in-flight budget of 16 MiB allows up to a third of itself).
    1 << 20
}

/// `outbound::content_bytes`: the f32 bytes `dims` declare, if at most
/// `max_tensor`.
fn content_bytes(dims: &[u64], max_tensor: u64) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))?
        .checked_mul(4)
        .filter(|&bytes| bytes <= max_tensor)
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let Some((declared, data)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let dims = [u64::from(u32::from_le_bytes(*declared))];
    let Some(content_len) = content_bytes(&dims, max_tensor_bytes()) else {
        // Refused before decoding: the requester falls back.
        return;
    };
    let max_elements = content_len / 4;
    let limits = Limits { max_elements };
    let mut data = data.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut data);
    }
    let data = &data[..];
    // What decoding may hold at once: the values, a refinement buffer and
    // a codec's scratch, each at most the declared tensor; the parsed
    // frames, at most one per 25 input bytes; and some slack.
    let bound = 3 * content_len as usize + 8 * data.len() + (64 << 10);

    let (parsed, held) = measure(|| Envelope::parse(data, &limits).map(|e| e.elements()));
    assert!(held <= bound, "parse held {held} bytes, bound {bound}");
    if let Ok(elements) = parsed {
        assert!(elements <= max_elements);
    }
    let mut values = Vec::new();
    let (pushed, held) = measure(|| decode_push(data, &limits, &mut values).is_ok());
    assert!(
        held <= bound,
        "decode_push held {held} bytes, bound {bound}"
    );
    if pushed {
        assert!(values.len() as u64 <= max_elements);
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
        .apply(&keyframe, &Limits { max_elements: 8 })
        .expect("our own keyframe applies");
    let before = replica.replica_hash();
    let (applied, held) = measure(|| match replica.apply(data, &limits) {
        Ok(values) => Ok(values.len() as u64),
        Err(err) => Err(err),
    });
    assert!(held <= bound, "apply held {held} bytes, bound {bound}");
    match applied {
        Ok(len) => assert!(len <= max_elements),
        Err(ApplyError::Dropped { .. }) => assert_eq!(replica.state(), None),
        Err(_) => assert_eq!(replica.replica_hash(), before),
    }
});

/// Rewrites the envelope header's CRC and each frame's, walking frames by
/// the lengths their headers claim, as far as the bytes reach.
fn fix_checksums(data: &mut [u8]) {
    if data.len() < HEADER_LEN {
        return;
    }
    seal(data, 0, HEADER_CHECKED);
    seal_frames(data, HEADER_LEN);
}
