//! gRPC's length-prefixed message framing, for unary calls.
//!
//! On HTTP/2 a gRPC message is a 5-byte prefix followed by the serialized
//! protobuf: one byte that says whether the message is compressed (`0` or
//! `1`), then the message length as a big-endian `u32`. A unary call such as
//! `RecvTensor` carries exactly one message in each direction.
//!
//! [`parse_single`] takes the collected body of such a call and returns the
//! message as a zero-copy slice; [`prefix`] and [`encode`] write one, with the
//! prefix kept apart from the message so a caller can send both as separate
//! chunks without copying the message.

use bytes::{Buf, Bytes};

/// Length of the prefix in front of every gRPC message.
pub const PREFIX_LEN: usize = 5;

/// Largest message TensorFlow can accept: protobuf's `INT_MAX` parse limit,
/// which TF sets on its input streams (it configures no gRPC size limit).
/// Use it as the `limit` of [`parse_single`] unless the config says less.
pub const TF_MAX_MESSAGE_LEN: usize = i32::MAX as usize;

/// Why a gRPC body is not exactly one uncompressed message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer than five bytes: no complete prefix.
    #[error("gRPC body has {len} bytes, fewer than the {PREFIX_LEN}-byte message prefix")]
    ShortPrefix {
        /// Bytes available.
        len: usize,
    },
    /// The compressed flag is set (`grpc-encoding` is in use). tlc does not
    /// decompress: the caller passes such a message through untouched.
    #[error("gRPC message is compressed (flag 1); it is passed through untouched")]
    Compressed,
    /// A flag other than 0 or 1: not valid gRPC.
    #[error("gRPC compressed flag is {0}; only 0 and 1 are valid")]
    InvalidFlag(u8),
    /// The prefix announces more bytes than the body holds.
    #[error("gRPC message announces {declared} bytes but only {available} follow the prefix")]
    Truncated {
        /// Length written in the prefix.
        declared: usize,
        /// Bytes after the prefix.
        available: usize,
    },
    /// Bytes after the first message: a second message or garbage. A unary
    /// call has exactly one message.
    #[error("{extra} bytes follow the gRPC message; a unary call carries exactly one")]
    TrailingBytes {
        /// Bytes after the end of the first message.
        extra: usize,
    },
    /// The message is larger than the caller's limit (or than a `u32` when
    /// encoding).
    #[error("gRPC message of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Length of the message.
        len: usize,
        /// The limit it broke.
        limit: usize,
    },
}

/// Returns the single message in a unary gRPC `body`, sharing `body`'s memory.
///
/// Fails if the body is not exactly one prefix and one uncompressed message of
/// at most `limit` bytes. [`FrameError::Compressed`] is not a fault of the
/// peer: the caller forwards such a body as it is.
pub fn parse_single(body: Bytes, limit: usize) -> Result<Bytes, FrameError> {
    let mut body = body;
    if body.len() < PREFIX_LEN {
        return Err(FrameError::ShortPrefix { len: body.len() });
    }
    let flag = body.get_u8();
    let declared = body.get_u32();
    match flag {
        0 => {}
        1 => return Err(FrameError::Compressed),
        other => return Err(FrameError::InvalidFlag(other)),
    }
    // A u32 always fits in usize on the 32- and 64-bit targets tlc runs on;
    // saturate rather than panic anywhere else.
    let declared = usize::try_from(declared).unwrap_or(usize::MAX);
    if declared > limit {
        return Err(FrameError::TooLarge {
            len: declared,
            limit,
        });
    }
    let available = body.len();
    if declared > available {
        return Err(FrameError::Truncated {
            declared,
            available,
        });
    }
    if available > declared {
        return Err(FrameError::TrailingBytes {
            extra: available - declared,
        });
    }
    Ok(body)
}

/// The 5-byte prefix of an uncompressed message of `message_len` bytes.
///
/// Send it before the message bytes, which may come in any number of chunks
/// as long as they add up to `message_len`.
pub fn prefix(message_len: usize) -> Result<[u8; PREFIX_LEN], FrameError> {
    let len = u32::try_from(message_len).map_err(|_| FrameError::TooLarge {
        len: message_len,
        limit: u32::MAX as usize,
    })?;
    let [a, b, c, d] = len.to_be_bytes();
    Ok([0, a, b, c, d])
}

/// Frames one message: returns its prefix and the message itself, ready to be
/// sent as two chunks. The message is not copied.
pub fn encode(message: Bytes) -> Result<(Bytes, Bytes), FrameError> {
    let prefix = prefix(message.len())?;
    Ok((Bytes::copy_from_slice(&prefix), message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(flag: u8, declared: u32, payload: &[u8]) -> Bytes {
        let mut v = vec![flag];
        v.extend_from_slice(&declared.to_be_bytes());
        v.extend_from_slice(payload);
        Bytes::from(v)
    }

    #[test]
    fn parses_one_message_without_copying() {
        let b = body(0, 3, b"abc");
        let msg = parse_single(b.clone(), TF_MAX_MESSAGE_LEN).unwrap();
        assert_eq!(&msg[..], b"abc");
        // The message is a view into the body.
        assert_eq!(msg.as_ptr(), b[PREFIX_LEN..].as_ptr());
    }

    #[test]
    fn parses_empty_message() {
        let msg = parse_single(body(0, 0, b""), 0).unwrap();
        assert!(msg.is_empty());
    }

    #[test]
    fn rejects_short_prefix() {
        for n in 0..PREFIX_LEN {
            let b = Bytes::from(vec![0u8; n]);
            assert_eq!(
                parse_single(b, 100),
                Err(FrameError::ShortPrefix { len: n })
            );
        }
    }

    #[test]
    fn compressed_and_invalid_flags() {
        assert_eq!(
            parse_single(body(1, 3, b"abc"), 100),
            Err(FrameError::Compressed)
        );
        assert_eq!(
            parse_single(body(2, 3, b"abc"), 100),
            Err(FrameError::InvalidFlag(2))
        );
        assert_eq!(
            parse_single(body(0xff, 3, b"abc"), 100),
            Err(FrameError::InvalidFlag(0xff))
        );
    }

    #[test]
    fn rejects_length_mismatch() {
        assert_eq!(
            parse_single(body(0, 4, b"abc"), 100),
            Err(FrameError::Truncated {
                declared: 4,
                available: 3
            })
        );
        assert_eq!(
            parse_single(body(0, 2, b"abc"), 100),
            Err(FrameError::TrailingBytes { extra: 1 })
        );
        assert_eq!(
            parse_single(body(0, u32::MAX, b"abc"), usize::MAX),
            Err(FrameError::Truncated {
                declared: u32::MAX as usize,
                available: 3
            })
        );
    }

    #[test]
    fn rejects_two_messages() {
        let mut two = body(0, 1, b"a").to_vec();
        two.extend_from_slice(&body(0, 1, b"b"));
        assert_eq!(
            parse_single(Bytes::from(two), 100),
            Err(FrameError::TrailingBytes { extra: 6 })
        );
    }

    #[test]
    fn enforces_limit_before_reading() {
        // The limit is checked on the declared length, so a huge announced
        // message is refused even though its bytes never came.
        assert_eq!(
            parse_single(body(0, 101, b""), 100),
            Err(FrameError::TooLarge {
                len: 101,
                limit: 100
            })
        );
        assert!(parse_single(body(0, 3, b"abc"), 3).is_ok());
    }

    #[test]
    fn prefix_is_big_endian() {
        assert_eq!(prefix(0).unwrap(), [0, 0, 0, 0, 0]);
        assert_eq!(prefix(0x0102_0304).unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(
            prefix(u32::MAX as usize).unwrap(),
            [0, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn prefix_refuses_more_than_u32() {
        let len = u32::MAX as usize + 1;
        assert_eq!(
            prefix(len),
            Err(FrameError::TooLarge {
                len,
                limit: u32::MAX as usize
            })
        );
    }

    #[test]
    fn encode_then_parse_round_trips() {
        let msg = Bytes::from_static(b"hello tensor");
        let (p, m) = encode(msg.clone()).unwrap();
        assert_eq!(p.len(), PREFIX_LEN);
        assert_eq!(m.as_ptr(), msg.as_ptr());
        let mut wire = p.to_vec();
        wire.extend_from_slice(&m);
        assert_eq!(parse_single(Bytes::from(wire), 100).unwrap(), msg);
    }
}
