//! The frame format: one self-describing, checksummed frame per tensor.
//!
//! `codec/FORMAT.md` describes it byte by byte; this module is its only
//! writer and parser. Parsing checks every field against the caller's
//! [`Limits`] before anything is allocated or decoded.

use crate::codec::CodecId;
use crate::entropy;
use crate::error::{DecodeError, EncodeError};

// `Params` lives in `params`, below both the frame and the codecs; the
// re-export keeps `tlc_codec::frame::Params` working.
pub use crate::params::Params;

/// The four bytes every frame starts with.
pub const MAGIC: [u8; 4] = *b"TLCF";
/// The format version this library writes and reads.
pub const VERSION: u8 = 1;
/// dtype byte for 32-bit floats (TensorFlow's `DT_FLOAT` enum value).
pub const DTYPE_F32: u8 = 1;
/// Size of the fixed part of the header, before the codec parameters.
pub const FIXED_HEADER_LEN: usize = 21;
/// Size of the CRC32C trailer.
pub const TRAILER_LEN: usize = 4;

const FLAG_FEEDBACK: u8 = 0x01;
const FLAG_ENTROPY: u8 = 0x02;

/// Everything the header of a frame says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameHeader {
    /// Codec and its parameters.
    pub params: Params,
    /// Whether the sender encoded with error feedback (informational).
    pub feedback: bool,
    /// Number of values in the tensor.
    pub elements: u64,
    /// Bytes stored after the parameters: the codec payload, or with the
    /// entropy stage `raw_len` and the coded bytes.
    pub payload_len: u32,
    /// With the entropy stage (flags bit 1), the length of the codec
    /// payload before it (`raw_len`, checked against the codec and `n`);
    /// `None` for a plain frame.
    pub raw_len: Option<u32>,
}

impl FrameHeader {
    /// The frame's codec.
    pub fn codec(&self) -> CodecId {
        self.params.codec()
    }

    /// Bytes of header before the payload (fixed part and parameters).
    pub fn header_len(&self) -> usize {
        FIXED_HEADER_LEN + Params::wire_len(self.codec())
    }

    /// Length of the codec payload: `raw_len` with the entropy stage,
    /// `payload_len` without.
    pub fn codec_payload_len(&self) -> u32 {
        self.raw_len.unwrap_or(self.payload_len)
    }

    /// Bytes of the whole frame: header, payload and checksum.
    pub fn frame_len(&self) -> usize {
        self.header_len() + self.payload_len as usize + TRAILER_LEN
    }
}

/// Caller-given bounds on what a frame may ask the decoder to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most values one frame may hold; the decoder never allocates more.
    pub max_elements: u64,
}

impl Default for Limits {
    /// 512 Mi values (2 GiB of f32), TensorFlow's own message ceiling.
    fn default() -> Self {
        Limits {
            max_elements: 512 * 1024 * 1024,
        }
    }
}

/// A parsed, checksum-verified frame borrowing its payload from the input.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The header fields.
    pub header: FrameHeader,
    /// The `payload_len` bytes stored after the parameters: the codec
    /// payload of a plain frame; `raw_len` and the coded bytes with the
    /// entropy stage ([`Frame::codec_payload`] decodes either).
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses the frame at the start of `bytes` (trailing bytes are left for
    /// the next frame: see [`FrameHeader::frame_len`]). Checks magic,
    /// version, codec, dtype, flags, the element limit, the checksum, the
    /// parameters, and the payload length for the codec (with the entropy
    /// stage, the declared `raw_len`).
    pub fn parse(bytes: &'a [u8], limits: &Limits) -> Result<Frame<'a>, DecodeError> {
        let truncated = |needed: u64| DecodeError::Truncated {
            needed,
            available: bytes.len(),
        };
        let fixed = bytes
            .get(..FIXED_HEADER_LEN)
            .ok_or(truncated(FIXED_HEADER_LEN as u64))?;
        let magic = [fixed[0], fixed[1], fixed[2], fixed[3]];
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        if fixed[4] != VERSION {
            return Err(DecodeError::UnsupportedVersion(fixed[4]));
        }
        let codec = CodecId::from_byte(fixed[5]).ok_or(DecodeError::UnknownCodec(fixed[5]))?;
        if fixed[6] != DTYPE_F32 {
            return Err(DecodeError::UnsupportedDtype(fixed[6]));
        }
        let flags = fixed[7];
        if flags & !(FLAG_FEEDBACK | FLAG_ENTROPY) != 0 {
            return Err(DecodeError::ReservedFlags(flags));
        }
        let mut elements_bytes = [0u8; 8];
        elements_bytes.copy_from_slice(&fixed[8..16]);
        let elements = u64::from_le_bytes(elements_bytes);
        if elements > limits.max_elements {
            return Err(DecodeError::TooManyElements {
                elements,
                limit: limits.max_elements,
            });
        }
        let payload_len = u32::from_le_bytes([fixed[16], fixed[17], fixed[18], fixed[19]]);
        let params_len = usize::from(fixed[20]);
        if params_len != Params::wire_len(codec) {
            return Err(DecodeError::BadParams(format!(
                "{codec} takes {} parameter bytes, frame has {params_len}",
                Params::wire_len(codec)
            )));
        }
        let header_len = FIXED_HEADER_LEN + params_len;
        let frame_len = header_len as u64 + u64::from(payload_len) + TRAILER_LEN as u64;
        if (bytes.len() as u64) < frame_len {
            return Err(truncated(frame_len));
        }
        // Checked above: frame_len <= bytes.len(), so it fits usize.
        let frame_len = frame_len as usize;
        let body_len = frame_len - TRAILER_LEN;
        let stored = u32::from_le_bytes([
            bytes[body_len],
            bytes[body_len + 1],
            bytes[body_len + 2],
            bytes[body_len + 3],
        ]);
        let computed = crc32c::crc32c(&bytes[..body_len]);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        let params = Params::parse(codec, &bytes[FIXED_HEADER_LEN..header_len], elements)?;
        let payload = &bytes[header_len..body_len];
        let raw_len = if flags & FLAG_ENTROPY != 0 {
            Some(entropy::split(payload)?.0)
        } else {
            None
        };
        let header = FrameHeader {
            params,
            feedback: flags & FLAG_FEEDBACK != 0,
            elements,
            payload_len,
            raw_len,
        };
        check_payload_len(&header)?;
        Ok(Frame { header, payload })
    }

    /// Payload bits per tensor value: the stored bytes, so after the entropy
    /// stage if the frame uses it (header and checksum not counted).
    pub fn payload_bits_per_value(&self) -> f64 {
        if self.header.elements == 0 {
            0.0
        } else {
            self.payload.len() as f64 * 8.0 / self.header.elements as f64
        }
    }
}

/// Checks that the codec payload's length (`raw_len` with the entropy
/// stage) is possible for the codec and count.
fn check_payload_len(header: &FrameHeader) -> Result<(), DecodeError> {
    let n = header.elements;
    let actual = u64::from(header.codec_payload_len());
    let bitmap = n.div_ceil(8);
    let quartic = n.div_ceil(5);
    let exact = match header.params {
        Params::None => Some(n.saturating_mul(4)),
        Params::Fp16 | Params::Bf16 => Some(n.saturating_mul(2)),
        Params::Int8 { .. } => Some(n),
        Params::Int8Rows { row_len } => Some(crate::int8::rows_payload_len(n, row_len)),
        Params::TernGrad { .. } => Some(quartic),
        Params::OneBit { .. } => Some(bitmap),
        Params::TopK { kept, .. } => Some(bitmap + 4 * u64::from(kept)),
        // Zero-run encoding makes the length data-dependent: at most one
        // byte per quartic byte, at least one byte per 14 of them.
        Params::ThreeLc { .. } => None,
    };
    let codec = header.codec().name();
    match exact {
        Some(expected) if expected != actual => Err(DecodeError::PayloadLength {
            codec,
            elements: n,
            expected,
            actual,
        }),
        Some(_) => Ok(()),
        None if actual > quartic || actual < quartic.div_ceil(14) => {
            Err(DecodeError::PayloadLength {
                codec,
                elements: n,
                expected: quartic,
                actual,
            })
        }
        None => Ok(()),
    }
}

/// Writes a frame around a payload that the caller appends in between.
///
/// `begin` reserves the header, the codec appends its payload to the same
/// buffer, and `finish` fills in the header and appends the checksum.
pub(crate) struct FrameWriter {
    start: usize,
    header_len: usize,
}

impl FrameWriter {
    pub(crate) fn begin(out: &mut Vec<u8>, codec: CodecId) -> FrameWriter {
        let start = out.len();
        let header_len = FIXED_HEADER_LEN + Params::wire_len(codec);
        out.resize(start + header_len, 0);
        FrameWriter { start, header_len }
    }

    /// Offset in `out` where the payload starts.
    pub(crate) fn payload_start(&self) -> usize {
        self.start + self.header_len
    }

    /// Fills in the header for the payload now in `out` and appends the
    /// checksum. `raw_len` is `Some` when the entropy stage has replaced the
    /// codec payload by `raw_len` and the coded bytes.
    pub(crate) fn finish(
        self,
        out: &mut Vec<u8>,
        params: Params,
        feedback: bool,
        raw_len: Option<u32>,
        elements: usize,
    ) -> Result<FrameHeader, EncodeError> {
        let payload_len = out.len() - self.payload_start();
        let payload_len =
            u32::try_from(payload_len).map_err(|_| EncodeError::TooLarge { elements })?;
        let header = FrameHeader {
            params,
            feedback,
            elements: elements as u64,
            payload_len,
            raw_len,
        };
        let head = &mut out[self.start..self.payload_start()];
        let flags = (if feedback { FLAG_FEEDBACK } else { 0 })
            | (if raw_len.is_some() { FLAG_ENTROPY } else { 0 });
        write_fixed_header(head, params.codec(), flags, header.elements, payload_len);
        params.write(&mut head[FIXED_HEADER_LEN..]);
        let crc = crc32c::crc32c(&out[self.start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(header)
    }
}

/// Fills the first [`FIXED_HEADER_LEN`] bytes of `head` (magic to
/// `params_len`): the one writer of that layout, for the encoder's frames
/// and for frames rebuilt from their compact form.
pub(crate) fn write_fixed_header(
    head: &mut [u8],
    codec: CodecId,
    flags: u8,
    elements: u64,
    payload_len: u32,
) {
    head[..4].copy_from_slice(&MAGIC);
    head[4] = VERSION;
    head[5] = codec as u8;
    head[6] = DTYPE_F32;
    head[7] = flags;
    head[8..16].copy_from_slice(&elements.to_le_bytes());
    head[16..20].copy_from_slice(&payload_len.to_le_bytes());
    head[20] = Params::wire_len(codec) as u8;
}
