//! Lossless compression of what two sidecars exchange besides envelopes:
//! TensorFlow's control calls (`RunGraph`, the `RecvTensor` requests and
//! their rendezvous keys, registrations), integer tensors (lookup ids,
//! `IndexedSlices` indices) and tensors too small to quantize.
//!
//! It stays gRPC on the hop: each message is compressed on its own as one
//! zstd frame and marked with gRPC's compressed flag, and the call carries
//! `grpc-encoding: zstd` beside the `tlc-hop` header (the `peer` module).
//! A message that does not shrink is sent as it is, flag clear. TensorFlow
//! never sees any of it: the sidecar next to it restores every message and
//! removes both headers.
//!
//! A reader trusts nothing: a compressed message must be one zstd frame
//! that declares its size, at most [`MAX_MESSAGE`] bytes, and decompresses
//! to exactly that size. Nothing larger is ever allocated.

use std::cell::RefCell;

use thiserror::Error;

/// The `grpc-encoding` a hop-compressed call carries.
pub const ENCODING: &str = "zstd";

/// Largest message compressed, and largest a reader restores: a bigger one
/// crosses as it is. Control messages and integer tensors are far smaller;
/// a large float tensor gains little from a lossless coder and would make
/// both sidecars hold it whole.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Messages shorter than this are not worth a zstd frame (its header alone
/// is 6–9 bytes).
pub const MIN_MESSAGE: usize = 32;

/// zstd's level: the fastest of its regular levels. Messages are small, so
/// the time goes to setting up, which higher levels make slower.
const LEVEL: i32 = 1;

/// Why a compressed message cannot be restored.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HopError {
    /// The frame does not say how large it decompresses, or is no zstd frame.
    #[error("compressed message without a declared size")]
    NoSize,
    /// The declared size is beyond [`MAX_MESSAGE`].
    #[error("compressed message declares {0} bytes, more than {MAX_MESSAGE}")]
    TooLarge(u64),
    /// zstd refused the bytes.
    #[error("compressed message is corrupt: {0}")]
    Corrupt(String),
    /// A body that is not whole gRPC framing, or a flag other than 0 or 1.
    #[error("hop-compressed body is not gRPC framing")]
    Framing,
    /// The frame decompressed to another size than it declared.
    #[error("compressed message declared {declared} bytes but holds {actual}")]
    WrongSize {
        /// What the frame header said.
        declared: u64,
        /// What came out.
        actual: usize,
    },
}

thread_local! {
    // One context per thread: making one costs more than compressing a
    // small message.
    static COMPRESSOR: RefCell<Option<zstd::zstd_safe::CCtx<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// Names a message that may serve as a reference: its xxh3-64.
pub fn reference_id(message: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(message)
}

/// Compresses `message` into `out` (cleared first). Returns whether it is
/// worth sending: `false` when the message is outside
/// [`MIN_MESSAGE`]`..=`[`MAX_MESSAGE`] or did not shrink, and `out` is then
/// to be ignored.
pub fn compress(message: &[u8], out: &mut Vec<u8>) -> bool {
    compress_with(message, None, out)
}

/// [`compress`] with `reference`, a message the reader also holds, as
/// zstd's raw-content dictionary: a control call that repeats the one
/// before but for a step number shrinks to a few bytes.
pub fn compress_with(message: &[u8], reference: Option<&[u8]>, out: &mut Vec<u8>) -> bool {
    out.clear();
    if !(MIN_MESSAGE..=MAX_MESSAGE).contains(&message.len()) {
        return false;
    }
    out.reserve(zstd::zstd_safe::compress_bound(message.len()));
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        let cctx = match slot.as_mut() {
            Some(c) => c,
            None => match zstd::zstd_safe::CCtx::try_create() {
                Some(c) => slot.insert(c),
                None => return false,
            },
        };
        let done = cctx.compress_using_dict(out, message, reference.unwrap_or_default(), LEVEL);
        matches!(done, Ok(len) if len < message.len())
    })
}

/// Restores a message [`compress`] made.
pub fn decompress(data: &[u8]) -> Result<Vec<u8>, HopError> {
    decompress_with(data, None)
}

/// The size a compressed message declares it restores to (its zstd frame
/// header's content size, which [`decompress_with`] holds it to), read
/// without restoring anything; `None` where it declares none.
pub fn declared_size(data: &[u8]) -> Option<u64> {
    zstd::zstd_safe::get_frame_content_size(data).ok().flatten()
}

/// Restores a message [`compress_with`] made with `reference`.
pub fn decompress_with(data: &[u8], reference: Option<&[u8]>) -> Result<Vec<u8>, HopError> {
    let Some(declared) = declared_size(data) else {
        return Err(HopError::NoSize);
    };
    if declared > MAX_MESSAGE as u64 {
        return Err(HopError::TooLarge(declared));
    }
    // Checked against MAX_MESSAGE just above.
    let mut out = Vec::with_capacity(declared as usize);
    DECOMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        let dctx = match slot.as_mut() {
            Some(d) => d,
            None => {
                let made = zstd::zstd_safe::DCtx::try_create()
                    .ok_or_else(|| HopError::Corrupt("no memory for a zstd context".into()))?;
                slot.insert(made)
            }
        };
        dctx.decompress_using_dict(&mut out, data, reference.unwrap_or_default())
            .map_err(|code| HopError::Corrupt(zstd::zstd_safe::get_error_name(code).to_owned()))
    })?;
    if out.len() as u64 != declared {
        return Err(HopError::WrongSize {
            declared,
            actual: out.len(),
        });
    }
    Ok(out)
}

/// The gRPC prefix's flag of a compressed message.
pub const COMPRESSED: u8 = 1;

/// Compresses every message of a whole gRPC body (`5`-byte prefixes and
/// messages back to back) that shrinks. Returns the new body and the
/// bytes of the messages compressed before and after, or `None` when no
/// message shrank, a message is already flagged compressed, or the body
/// is not whole gRPC framing (it then crosses as it is).
pub fn compress_body(body: &[u8]) -> Option<(Vec<u8>, Counted)> {
    compress_body_with(body, None)
}

/// [`compress_body`] with `reference` as every message's dictionary (see
/// [`compress_with`]).
pub fn compress_body_with(body: &[u8], reference: Option<&[u8]>) -> Option<(Vec<u8>, Counted)> {
    let mut out = Vec::with_capacity(body.len());
    let mut packed = Vec::new();
    let mut counted = Counted::default();
    let mut rest = body;
    while !rest.is_empty() {
        let (flag, message, after) = split_message(rest)?;
        if flag != 0 {
            // Already compressed by its sender: not plain gRPC, so the
            // body crosses as it is (a reader would restore the message).
            return None;
        }
        if compress_with(message, reference, &mut packed) {
            out.push(COMPRESSED);
            out.extend_from_slice(&(packed.len() as u32).to_be_bytes());
            out.extend_from_slice(&packed);
            counted.add(message.len(), packed.len());
        } else {
            out.extend_from_slice(&rest[..rest.len() - after.len()]);
        }
        rest = after;
    }
    (counted.messages > 0).then_some((out, counted))
}

/// Restores a whole gRPC body [`compress_body`] made, whose restored
/// messages may together hold at most `limit` bytes.
pub fn restore_body(body: &[u8], limit: usize) -> Result<(Vec<u8>, Counted), HopError> {
    restore_body_with(body, limit, None)
}

/// [`restore_body`] of a body [`compress_body_with`] made with `reference`.
pub fn restore_body_with(
    body: &[u8],
    limit: usize,
    reference: Option<&[u8]>,
) -> Result<(Vec<u8>, Counted), HopError> {
    let mut out = Vec::new();
    let mut counted = Counted::default();
    let mut rest = body;
    while !rest.is_empty() {
        let (flag, message, after) = split_message(rest).ok_or(HopError::Framing)?;
        if flag == COMPRESSED {
            let restored = decompress_with(message, reference)?;
            if out.len() + PREFIX_LEN + restored.len() > limit {
                return Err(HopError::TooLarge(restored.len() as u64));
            }
            out.push(0);
            out.extend_from_slice(&(restored.len() as u32).to_be_bytes());
            out.extend_from_slice(&restored);
            counted.add(restored.len(), message.len());
        } else if flag == 0 {
            if out.len() + PREFIX_LEN + message.len() > limit {
                return Err(HopError::TooLarge(message.len() as u64));
            }
            out.extend_from_slice(&rest[..rest.len() - after.len()]);
        } else {
            return Err(HopError::Framing);
        }
        rest = after;
    }
    Ok((out, counted))
}

/// Bytes of the gRPC prefix.
const PREFIX_LEN: usize = 5;

/// The first message of `body`: its flag, its bytes and what follows it;
/// `None` if the framing is cut short.
fn split_message(body: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let prefix = body.get(..PREFIX_LEN)?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    let end = PREFIX_LEN.checked_add(len)?;
    let message = body.get(PREFIX_LEN..end)?;
    Some((prefix[0], message, &body[end..]))
}

/// Messages compressed or restored, and their bytes before (`raw`) and
/// after (`wire`) compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Messages.
    pub messages: u64,
    /// Their restored size.
    pub raw_bytes: u64,
    /// Their compressed size.
    pub wire_bytes: u64,
}

impl Counted {
    /// Counts one message of `raw` bytes sent as `wire`.
    pub fn add(&mut self, raw: usize, wire: usize) {
        self.messages += 1;
        self.raw_bytes += raw as u64;
        self.wire_bytes += wire as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control_message() -> Vec<u8> {
        // What a RecvTensor request looks like: a rendezvous key, repeated.
        let key = b"/job:ps/replica:0/task:0/device:CPU:0;5f1b2c3d4e5f6071;\
                    /job:worker/replica:0/task:1/device:CPU:0;edge_12_w1/read;0:0";
        let mut message = Vec::new();
        for step in 0..4u8 {
            message.extend_from_slice(&[0x08, step, 0x12, key.len() as u8]);
            message.extend_from_slice(key);
        }
        message
    }

    #[test]
    fn round_trips_and_shrinks() {
        let message = control_message();
        let mut out = Vec::new();
        assert!(compress(&message, &mut out));
        assert!(
            out.len() < message.len() / 2,
            "{} of {}",
            out.len(),
            message.len()
        );
        assert_eq!(decompress(&out), Ok(message));
    }

    #[test]
    fn whole_bodies_round_trip_and_leave_what_does_not_shrink() {
        let message = control_message();
        let mut body = Vec::new();
        for m in [&message[..], b"tiny", &message[..]] {
            body.push(0);
            body.extend_from_slice(&(m.len() as u32).to_be_bytes());
            body.extend_from_slice(m);
        }
        let (packed, counted) = compress_body(&body).unwrap();
        assert_eq!(counted.messages, 2);
        assert!(packed.len() < body.len());
        let (restored, back) = restore_body(&packed, 1 << 20).unwrap();
        assert_eq!(restored, body);
        assert_eq!(back, counted);
        // A message already flagged compressed: the body stays as it is.
        let mut flagged = body.clone();
        flagged[0] = 1;
        assert_eq!(compress_body(&flagged), None);
        // Nothing to gain, or not gRPC framing: no new body.
        assert_eq!(compress_body(&[0, 0, 0, 0, 4, 1, 2, 3, 4]), None);
        assert_eq!(compress_body(&[0, 0, 0, 9, 4, 1, 2]), None);
        // Hostile: cut short, bad flags, beyond the limit.
        assert_eq!(
            restore_body(&packed[..packed.len() - 1], 1 << 20).err(),
            Some(HopError::Framing)
        );
        assert_eq!(
            restore_body(&[2, 0, 0, 0, 0], 1 << 20).err(),
            Some(HopError::Framing)
        );
        assert!(matches!(
            restore_body(&packed, 100),
            Err(HopError::TooLarge(_))
        ));
    }

    #[test]
    fn a_reference_shrinks_a_repeated_call_to_a_few_bytes() {
        let before = control_message();
        let mut after = before.clone();
        after[1] = 9; // another step
        let (mut plain, mut referenced) = (Vec::new(), Vec::new());
        assert!(compress(&after, &mut plain));
        assert!(compress_with(&after, Some(&before), &mut referenced));
        assert!(referenced.len() < 30, "{} bytes", referenced.len());
        assert!(referenced.len() * 3 < plain.len());
        assert_eq!(
            decompress_with(&referenced, Some(&before)),
            Ok(after.clone())
        );
        // Without the reference, or with another, it does not restore.
        assert!(decompress(&referenced).is_err() || decompress(&referenced) != Ok(after.clone()));
        let other = vec![b'x'; before.len()];
        assert_ne!(decompress_with(&referenced, Some(&other)), Ok(after));
    }

    #[test]
    fn tiny_huge_and_incompressible_messages_are_not_compressed() {
        let mut out = Vec::new();
        assert!(!compress(b"short", &mut out));
        assert!(!compress(&vec![7u8; MAX_MESSAGE + 1], &mut out));
        // A xorshift stream: nothing to find.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(!compress(&noise, &mut out));
    }

    #[test]
    fn hostile_frames_are_refused_without_allocating_their_claim() {
        let mut out = Vec::new();
        assert!(compress(&control_message(), &mut out));
        // Truncated.
        assert!(decompress(&out[..out.len() - 3]).is_err());
        // Not zstd at all.
        assert_eq!(decompress(b"not a zstd frame"), Err(HopError::NoSize));
        assert_eq!(decompress(b""), Err(HopError::NoSize));
        // A frame declaring more than MAX_MESSAGE: a bomb is refused by
        // its header.
        let bomb = zstd::bulk::compress(&vec![0u8; MAX_MESSAGE + 1], 1).unwrap();
        assert_eq!(
            decompress(&bomb),
            Err(HopError::TooLarge(MAX_MESSAGE as u64 + 1))
        );
        // A frame without a declared size (streamed).
        let mut streamed = Vec::new();
        {
            use std::io::Write;
            let mut encoder = zstd::stream::Encoder::new(&mut streamed, 1).unwrap();
            encoder.write_all(&control_message()).unwrap();
            encoder.finish().unwrap();
        }
        if zstd::zstd_safe::get_frame_content_size(&streamed)
            .ok()
            .flatten()
            .is_none()
        {
            assert_eq!(decompress(&streamed), Err(HopError::NoSize));
        }
        // A corrupted body.
        let mut corrupt = out.clone();
        let last = corrupt.len() - 1;
        corrupt[last / 2] ^= 0xff;
        corrupt[last] ^= 0xff;
        let _ = decompress(&corrupt); // an error or other bytes, never a panic
    }
}
