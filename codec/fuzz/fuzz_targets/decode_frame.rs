//! Arbitrary bytes into `Frame::parse` and `decode`, frame after frame, under
//! a small element limit: never a panic, never an output above the limit.
//!
//! If the first byte is odd, the checksum of every frame is recomputed
//! before parsing, so the fuzzer explores the parameter and payload checks
//! behind the CRC instead of stopping at it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_codec::{decode, Frame, Limits};

const LIMITS: Limits = Limits {
    max_elements: 1 << 16,
};

/// Header bytes before the parameters, and the CRC32C trailer.
const FIXED: usize = 21;
const TRAILER: usize = 4;

/// Rewrites the trailer of each frame in `buf` to the CRC32C of its body.
fn fix_checksums(buf: &mut [u8]) {
    let mut at = 0;
    while buf.len() - at >= FIXED {
        let head = &buf[at..at + FIXED];
        let payload_len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
        let len = FIXED as u64 + u64::from(head[20]) + u64::from(payload_len) + TRAILER as u64;
        if at as u64 + len > buf.len() as u64 {
            return;
        }
        let end = at + len as usize;
        let crc = crc32c::crc32c(&buf[at..end - TRAILER]);
        buf[end - TRAILER..end].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut buf);
    }
    let mut bytes = &buf[..];
    let mut out = Vec::new();
    loop {
        let parsed = Frame::parse(bytes, &LIMITS);
        let decoded = decode(bytes, &LIMITS, &mut out);
        let Ok(frame) = parsed else {
            assert!(decoded.is_err(), "decode accepted what parse refused");
            return;
        };
        let header = frame.header;
        assert!(header.elements <= LIMITS.max_elements);
        let len = header.frame_len();
        assert!(len <= bytes.len() && len >= FIXED + TRAILER);
        if let Ok(again) = decoded {
            assert_eq!(again.header, header);
            assert_eq!(out.len() as u64, header.elements);
        }
        bytes = &bytes[len..];
    }
});
