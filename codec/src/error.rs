//! Typed errors for specifying, encoding and decoding.

use thiserror::Error;

/// A codec setting that is out of its allowed range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpecError {
    /// The 3LC sparsity multiplier must satisfy `1 <= s < 2`.
    #[error("sparsity {0} is out of range [1.0, 2.0)")]
    Sparsity(f32),
    /// The top-k share must satisfy `0 < k <= 100` (percent).
    #[error("top-k share {0}% is out of range (0, 100]")]
    TopKPercent(f32),
    /// The codec name is not one this library knows.
    #[error("unknown codec '{0}' (known: none, fp16, bf16, int8, terngrad, onebit, topk, 3lc)")]
    UnknownCodec(String),
}

/// Why a tensor could not be encoded. The encoder's state (its error buffer)
/// is left exactly as it was before the call, so the caller can send the
/// tensor another way (uncompressed) and carry on.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EncodeError {
    /// A lossy codec was given a NaN or an infinity (after error accumulation),
    /// which it cannot represent without poisoning the error buffer.
    #[error("tensor holds a non-finite value (NaN or infinity); a lossy codec cannot encode it")]
    NonFinite,
    /// A value is finite but outside the target format's range
    /// (for example above 65504 for fp16).
    #[error("value {value} at index {index} is outside the range of {codec}")]
    OutOfRange {
        /// The codec whose range was exceeded.
        codec: &'static str,
        /// The first offending value (after error accumulation).
        value: f32,
        /// Its position in the tensor.
        index: usize,
    },
    /// The frame would not fit the format's 32-bit payload length.
    #[error("tensor of {elements} values is too large for one frame")]
    TooLarge {
        /// Number of values in the tensor.
        elements: usize,
    },
}

/// Why a frame was rejected. Decoding never panics and never trusts a length
/// from the frame before checking it against the caller's limit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the frame says it has.
    #[error("frame truncated: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the frame needs (as far as could be parsed).
        needed: u64,
        /// Bytes available.
        available: usize,
    },
    /// The first four bytes are not the frame magic `TLCF`.
    #[error("not a tlc frame (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// A format version this decoder does not understand.
    #[error("unsupported frame format version {0} (this decoder reads version 1)")]
    UnsupportedVersion(u8),
    /// A codec id this decoder does not know.
    #[error("unknown codec id {0}")]
    UnknownCodec(u8),
    /// A dtype other than the ones supported (only f32 today).
    #[error("unsupported dtype {0} (only 1 = f32 is supported)")]
    UnsupportedDtype(u8),
    /// Reserved flag bits are set.
    #[error("reserved flag bits set: {0:#04x}")]
    ReservedFlags(u8),
    /// The frame's element count exceeds the caller's limit.
    #[error("frame has {elements} elements, above the limit of {limit}")]
    TooManyElements {
        /// Count claimed by the frame.
        elements: u64,
        /// Caller's limit.
        limit: u64,
    },
    /// The checksum does not match the frame's bytes.
    #[error("checksum mismatch: frame says {stored:#010x}, bytes give {computed:#010x}")]
    Checksum {
        /// CRC32C stored in the frame.
        stored: u32,
        /// CRC32C computed over the frame.
        computed: u32,
    },
    /// The codec parameters have the wrong length or an invalid value.
    #[error("bad codec parameters: {0}")]
    BadParams(String),
    /// The payload length does not fit the codec and element count.
    #[error("payload of {actual} bytes does not fit {codec} with {elements} elements (expected {expected})")]
    PayloadLength {
        /// Codec name.
        codec: &'static str,
        /// Element count.
        elements: u64,
        /// Expected payload length (or the most allowed).
        expected: u64,
        /// Payload length in the frame.
        actual: u64,
    },
    /// The payload is inconsistent (for example a zero-run that overruns
    /// the tensor, a bitmap that disagrees with the value count, or a
    /// non-zero padding digit).
    #[error("corrupt payload: {0}")]
    CorruptPayload(&'static str),
    /// The entropy stage (flags bit 1) is malformed: fewer than 4 stored
    /// bytes, no coded bytes, coded bytes zstd refuses (the reason is
    /// zstd's), or coded bytes that expand to a length other than
    /// `raw_len`. A `raw_len` the codec and `n` do not allow is a
    /// [`DecodeError::PayloadLength`].
    #[error("entropy stage: {0}")]
    Entropy(&'static str),
    /// A frame in its compact form (`FORMAT.md`) is malformed: a
    /// number that runs past its bytes or past 64 bits, or a length that
    /// runs past the frame.
    #[error("compact frame: {0}")]
    Compact(&'static str),
    /// The output buffer has the wrong length for the frame.
    #[error("output holds {actual} values but the frame has {expected}")]
    OutputLength {
        /// Values in the frame.
        expected: u64,
        /// Values the output buffer holds.
        actual: usize,
    },
}
