//! A peer's hop-compressed gRPC body (`tlc_wire::hop`), as the holder's
//! sidecar restores a compressed request (`restore_body`, or
//! `restore_body_with` the previous request of the call as the reference)
//! and the requester's a compressed answer (message by message,
//! `decompress`); and what the requester's side makes of a body it
//! compresses (`compress_body`, `compress_body_with`). Each `_with`
//! function without a reference is the plain one.
//!
//! Must hold: no panic; a zstd frame restores to at most
//! [`MAX_MESSAGE`] bytes; a restored body is whole gRPC framing of plain
//! messages (flag 0) within the caller's limit, counting no more messages
//! than it had compressed ones and no more wire bytes than it read; a
//! body `compress_body` packs is smaller, and of a body of plain messages
//! (what a sidecar compresses: its call carries no `grpc-encoding`) the
//! pack restores to exactly the body, within the body's own length as the
//! limit and not within one byte less; a message `compress` packs
//! decompresses to itself.
//!
//! Input: a mode byte, then the body. With the mode's low bit set the gRPC
//! framing is repaired before use (each length cut to what remains, a
//! tail shorter than a prefix dropped), so that mutations reach the
//! messages; bits 1–2 pick the restore limit (unbounded, the sidecar's
//! `hop::MAX_REQUEST` of 64 KiB, 64 bytes, the body's length); with bit 3
//! the body's first message is the reference of every call (a packed body
//! restored without it must not panic either). Seeds:
//! `daemon/fuzz`'s `seeds` binary.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_wire::hop::{self, HopError, COMPRESSED, MAX_MESSAGE};

/// The sidecar's `hop::MAX_REQUEST` (`tlc-sidecar`, which this crate does
/// not build): the largest request it gathers to compress or restore.
const SIDECAR_MAX_REQUEST: usize = 64 << 10;

/// Bytes of a gRPC message prefix (flag and big-endian length).
const PREFIX_LEN: usize = 5;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let mut body = rest.to_vec();
    if mode & 1 == 1 {
        fix_framing(&mut body);
    }
    let body = &body[..];
    let limit = match (mode >> 1) & 3 {
        0 => usize::MAX,
        1 => SIDECAR_MAX_REQUEST,
        2 => 64,
        _ => body.len(),
    };

    let messages = split(body);
    let first = messages.as_ref().and_then(|m| m.first()).map(|&(_, m)| m);
    let reference = first.filter(|_| mode & 8 != 0);

    // One message as the requester's stream restores it.
    if let Ok(message) = hop::decompress_with(body, reference) {
        assert!(message.len() <= MAX_MESSAGE);
    }
    let mut packed = Vec::new();
    if hop::compress_with(body, reference, &mut packed) {
        assert!(packed.len() < body.len());
        assert_eq!(
            hop::decompress_with(&packed, reference).as_deref(),
            Ok(body)
        );
    }

    // A whole body as the holder restores a request.
    if let Ok((restored, counted)) = hop::restore_body_with(body, limit, reference) {
        let framing = messages
            .as_ref()
            .expect("a restored body was whole framing");
        assert!(restored.len() <= limit);
        let out = split(&restored).expect("a restored body is whole framing");
        assert_eq!(out.len(), framing.len());
        assert!(out.iter().all(|&(flag, _)| flag == 0));
        let compressed = framing.iter().filter(|&&(f, _)| f == COMPRESSED).count();
        assert_eq!(counted.messages, compressed as u64);
        assert!(counted.wire_bytes <= body.len() as u64);
        // Plain messages cross unchanged, in place.
        for ((flag, sent), (_, got)) in framing.iter().zip(&out) {
            if *flag == 0 {
                assert_eq!(sent, got);
            }
        }
    }

    // A body as the requester compresses it.
    let Some((packed, counted)) = hop::compress_body_with(body, reference) else {
        return;
    };
    let framing = messages.expect("compress_body packs only whole framing");
    assert!(counted.messages >= 1);
    assert!(packed.len() < body.len());
    assert!(counted.wire_bytes < counted.raw_bytes);
    let restored = hop::restore_body_with(&packed, usize::MAX, reference);
    if framing.iter().all(|&(flag, _)| flag == 0) {
        assert_eq!(restored, Ok((body.to_vec(), counted)));
        assert_eq!(
            hop::restore_body_with(&packed, body.len(), reference),
            Ok((body.to_vec(), counted))
        );
        assert!(matches!(
            hop::restore_body_with(&packed, body.len() - 1, reference),
            Err(HopError::TooLarge(_))
        ));
    }
    if reference.is_some() {
        // The holder lost the reference: an error or other bytes.
        let _ = hop::restore_body(&packed, limit);
    }
    // With a message already flagged compressed (or a flag gRPC does not
    // define) in the body, compress_body passes it on as it is and the
    // restorer reads it as one of its own: the round trip does not hold
    // for such bodies; a sidecar compresses only calls without a
    // `grpc-encoding`, whose messages are all plain.
});

/// The messages of a whole gRPC body (flag and bytes), or `None` if the
/// framing is cut short.
fn split(body: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut messages = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let prefix = rest.get(..PREFIX_LEN)?;
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        let message = rest.get(PREFIX_LEN..PREFIX_LEN.checked_add(len)?)?;
        messages.push((prefix[0], message));
        rest = &rest[PREFIX_LEN + len..];
    }
    Some(messages)
}

/// Makes `body` whole gRPC framing: each message's length is cut to the
/// bytes that remain, and a tail shorter than a prefix is dropped.
fn fix_framing(body: &mut Vec<u8>) {
    let mut at = 0;
    while body.len() - at >= PREFIX_LEN {
        let claimed = u32::from_be_bytes([body[at + 1], body[at + 2], body[at + 3], body[at + 4]]);
        let len = (claimed as usize).min(body.len() - at - PREFIX_LEN);
        body[at + 1..at + PREFIX_LEN].copy_from_slice(&(len as u32).to_be_bytes());
        at += PREFIX_LEN + len;
    }
    body.truncate(at);
}
