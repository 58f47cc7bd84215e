//! A peer's compact envelope (`tlc_wire::compact`), as the requesting
//! sidecar turns it back into its full form before anything else reads it
//! (`sidecar/requester/restore.rs`, `prepare`): with the element limit of
//! the shape its response declares.
//!
//! Must hold: no panic; what `unpack` writes is bounded by its input (at
//! most `MAX_GROWTH + 1` bytes a compact byte plus `GROWTH_SLACK` and a
//! frame's header), never by a count the input declares; a full form that parses as an envelope holds no frame beyond
//! the limit and packs back to exactly the input.
//!
//! Input: a mode byte, the declared element count (u32, little-endian, at
//! most 2^18 used: the daemon's `max_tensor_mib = 1`), then the compact
//! envelope. With the mode's low bit set its checksum is rewritten before
//! unpacking, so that mutations get past it to the checks behind. Seeds:
//! `daemon/fuzz`'s `seeds` binary.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_codec::Limits;
use tlc_wire::compact::{pack, unpack, GROWTH_SLACK, MAX_GROWTH};
use tlc_wire::envelope::Envelope;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let Some((declared, compact)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let limits = Limits {
        max_elements: u64::from(u32::from_le_bytes(*declared)).min(1 << 18),
    };
    let mut compact = compact.to_vec();
    if mode & 1 == 1 && compact.len() >= 4 {
        let body = compact.len() - 4;
        let crc = crc32c::crc32c(&compact[..body]);
        compact[body..].copy_from_slice(&crc.to_le_bytes());
    }
    let mut full = Vec::new();
    let unpacked = unpack(&compact, &limits, &mut full);
    assert!(
        full.len() <= (MAX_GROWTH + 1) * compact.len() + GROWTH_SLACK + 64,
        "{} compact bytes became {}",
        compact.len(),
        full.len()
    );
    if unpacked.is_err() {
        return;
    }
    let Ok(envelope) = Envelope::parse(&full, &limits) else {
        return;
    };
    for frame in envelope.frames() {
        assert!(frame.header.elements <= limits.max_elements);
    }
    let mut again = Vec::new();
    pack(&full, &mut again).expect("a parsed envelope packs");
    assert_eq!(again, compact, "the full form packs back to its input");
});
