//! A frame's compact form: the same frame without what a hop between two
//! sidecars does not need. Magic, version, dtype and the parameters'
//! length are fixed by the format, the element count and payload length
//! are varints, and the checksum is left to the container (the compact
//! envelope carries one for all its frames). 25 bytes of a frame's
//! framing become about 7.
//!
//! `pack` turns a checked frame into its compact form and `unpack` turns
//! it back, byte for byte, so that every check of [`Frame::parse`] still
//! runs on what a receiver decodes. `FORMAT.md` gives the layout.

use crate::codec::CodecId;
use crate::error::DecodeError;
use crate::frame::{write_fixed_header, Frame, Limits, FIXED_HEADER_LEN, TRAILER_LEN};
use crate::params::Params;

/// Flags a frame may carry (feedback, entropy stage); the rest are reserved.
const KNOWN_FLAGS: u8 = 0x03;

/// Appends `value` as a little-endian base-128 varint (1 to 10 bytes).
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a varint at the start of `bytes`: the value and the bytes it
/// took. `None` if it runs past `bytes` or past 64 bits, or is not in its
/// shortest form (so that every value has one encoding).
pub fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        if i == 9 && byte > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            let shortest = i == 0 || byte != 0;
            return shortest.then_some((value, i + 1));
        }
    }
    None
}

/// Appends the compact form of the frame at the start of `frame` (checked
/// first, checksum included, against `limits`) to `out`. Returns the bytes
/// of `frame` it took, where the next frame starts.
pub fn pack(frame: &[u8], limits: &Limits, out: &mut Vec<u8>) -> Result<usize, DecodeError> {
    let parsed = Frame::parse(frame, limits)?;
    let header = parsed.header;
    let params_at = FIXED_HEADER_LEN;
    let payload_at = header.header_len();
    out.push(header.codec() as u8);
    out.push(frame[7]);
    put_varint(out, header.elements);
    put_varint(out, u64::from(header.payload_len));
    out.extend_from_slice(&frame[params_at..payload_at]);
    out.extend_from_slice(parsed.payload);
    Ok(header.frame_len())
}

/// Appends to `out` the frame whose compact form starts `compact`, byte
/// for byte as [`pack`] read it, checksum recomputed. Returns the bytes of
/// `compact` it took. Checks what the rebuilding needs (codec, flags, the
/// element limit, lengths within `compact`); the caller parses the result
/// with [`Frame::parse`] for the rest.
pub fn unpack(compact: &[u8], limits: &Limits, out: &mut Vec<u8>) -> Result<usize, DecodeError> {
    let truncated = |needed: usize| DecodeError::Truncated {
        needed: needed as u64,
        available: compact.len(),
    };
    let [codec, flags, ..] = *compact else {
        return Err(truncated(2));
    };
    let codec = CodecId::from_byte(codec).ok_or(DecodeError::UnknownCodec(codec))?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(DecodeError::ReservedFlags(flags));
    }
    let mut at = 2;
    let next = |at: &mut usize| {
        let (value, used) = get_varint(&compact[*at..]).ok_or(DecodeError::Compact(
            "a length runs past the frame or past 64 bits",
        ))?;
        *at += used;
        Ok::<u64, DecodeError>(value)
    };
    let elements = next(&mut at)?;
    if elements > limits.max_elements {
        return Err(DecodeError::TooManyElements {
            elements,
            limit: limits.max_elements,
        });
    }
    let payload_len = next(&mut at)?;
    let payload_len = u32::try_from(payload_len)
        .map_err(|_| DecodeError::Compact("payload length beyond 32 bits"))?;
    let params_len = Params::wire_len(codec);
    let end = (at + params_len)
        .checked_add(payload_len as usize)
        .ok_or(DecodeError::Compact("payload length runs past the frame"))?;
    let rest = compact.get(at..end).ok_or(truncated(end))?;
    let start = out.len();
    out.reserve(FIXED_HEADER_LEN + rest.len() + TRAILER_LEN);
    out.resize(start + FIXED_HEADER_LEN, 0);
    write_fixed_header(&mut out[start..], codec, flags, elements, payload_len);
    out.extend_from_slice(rest);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Codec, Encoder, EntropyStage, Feedback, Sparsity};

    fn frames() -> Vec<Vec<u8>> {
        let values: Vec<f32> = (0..1000)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let codecs = [
            Codec::None,
            Codec::Fp16,
            Codec::Int8,
            Codec::ThreeLc {
                sparsity: Sparsity::ONE,
            },
        ];
        let mut frames = Vec::new();
        for codec in codecs {
            for entropy in [EntropyStage::Off, EntropyStage::Zstd] {
                let mut encoder = Encoder::new(codec, Feedback::On);
                encoder.set_entropy_stage(entropy);
                let mut out = Vec::new();
                encoder.encode(&values, &mut out).unwrap();
                frames.push(out);
            }
        }
        frames
    }

    #[test]
    fn every_codec_comes_back_byte_for_byte_and_smaller() {
        let limits = Limits::default();
        for frame in frames() {
            let mut compact = Vec::new();
            assert_eq!(pack(&frame, &limits, &mut compact).unwrap(), frame.len());
            assert!(
                compact.len() + 18 <= frame.len(),
                "{} -> {}",
                frame.len(),
                compact.len()
            );
            let mut back = Vec::new();
            assert_eq!(unpack(&compact, &limits, &mut back).unwrap(), compact.len());
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn varints_round_trip_and_reject_what_is_not_shortest_or_too_long() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(get_varint(&out), Some((value, out.len())));
            assert_eq!(get_varint(&out[..out.len() - 1]), None);
        }
        assert_eq!(get_varint(&[0x80, 0x00]), None, "zero in two bytes");
        assert_eq!(get_varint(&[0xff; 10]), None, "past 64 bits");
        let mut eleven = vec![0x80; 10];
        eleven.push(0);
        assert_eq!(get_varint(&eleven), None);
    }

    #[test]
    fn hostile_compact_frames_are_refused_before_anything_large_is_written() {
        let limits = Limits { max_elements: 1000 };
        let frame = &frames()[6];
        let mut compact = Vec::new();
        pack(frame, &limits, &mut compact).unwrap();
        let mut out = Vec::new();
        for cut in 0..compact.len() {
            assert!(
                unpack(&compact[..cut], &limits, &mut out).is_err(),
                "cut at {cut}"
            );
        }
        let mut bad = compact.clone();
        bad[0] = 99;
        assert_eq!(
            unpack(&bad, &limits, &mut out),
            Err(DecodeError::UnknownCodec(99))
        );
        let mut bad = compact.clone();
        bad[1] = 0x80;
        assert_eq!(
            unpack(&bad, &limits, &mut out),
            Err(DecodeError::ReservedFlags(0x80))
        );
        let small = Limits { max_elements: 999 };
        assert!(matches!(
            unpack(&compact, &small, &mut out),
            Err(DecodeError::TooManyElements { .. })
        ));
        let mut huge = vec![compact[0], compact[1]];
        put_varint(&mut huge, 10);
        put_varint(&mut huge, u64::from(u32::MAX));
        assert!(unpack(&huge, &limits, &mut out).is_err());
        let mut wide = vec![compact[0], compact[1]];
        put_varint(&mut wide, 10);
        put_varint(&mut wide, 1 << 40);
        assert_eq!(
            unpack(&wide, &limits, &mut out),
            Err(DecodeError::Compact("payload length beyond 32 bits"))
        );
    }
}
