//! Walking a buffer of concatenated frames, naming each failure by frame
//! index and byte offset.

use anyhow::{Context, Result};
use tlc_codec::{Frame, Limits};

/// One frame found in a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    /// Position of the frame in the buffer, from 0.
    pub index: usize,
    /// Byte offset of the frame's first byte.
    pub offset: usize,
    /// The parsed, checksum-verified frame.
    pub frame: Frame<'a>,
}

impl Located<'_> {
    /// Byte offset of the codec payload.
    pub fn payload_offset(&self) -> usize {
        self.offset + self.frame.header.header_len()
    }

    /// Bytes of the whole frame (header, payload, checksum).
    pub fn frame_len(&self) -> usize {
        self.frame.header.frame_len()
    }

    /// Decodes the frame into `out`, resized to its element count.
    pub fn decode_into(&self, out: &mut Vec<f32>) -> Result<()> {
        // Frame::parse bounded the count by the caller's limits, which are
        // themselves a u64 the user chose: refuse rather than truncate.
        let n = usize::try_from(self.frame.header.elements)
            .context("frame holds more values than this machine can address")
            .with_context(|| self.describe())?;
        out.clear();
        out.resize(n, 0.0);
        self.frame.decode_into(out).with_context(|| self.describe())
    }

    fn describe(&self) -> String {
        describe(self.index, self.offset)
    }
}

fn describe(index: usize, offset: usize) -> String {
    format!("frame {index} at byte offset {offset}")
}

/// An iterator over the frames of a buffer, which stops after the first
/// error. A buffer that ends inside a frame is an error; an empty buffer
/// has no frames.
pub struct Frames<'a> {
    bytes: &'a [u8],
    offset: usize,
    index: usize,
    limits: Limits,
    failed: bool,
}

impl<'a> Frames<'a> {
    /// Walks `bytes` from the start, checking every frame against `limits`.
    pub fn new(bytes: &'a [u8], limits: Limits) -> Frames<'a> {
        Frames {
            bytes,
            offset: 0,
            index: 0,
            limits,
            failed: false,
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Located<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.bytes.get(self.offset..).filter(|r| !r.is_empty())?;
        if self.failed {
            return None;
        }
        let (index, offset) = (self.index, self.offset);
        match Frame::parse(rest, &self.limits) {
            Ok(frame) => {
                self.index += 1;
                self.offset += frame.header.frame_len();
                Some(Ok(Located {
                    index,
                    offset,
                    frame,
                }))
            }
            Err(err) => {
                self.failed = true;
                let remaining = rest.len();
                Some(Err(anyhow::Error::new(err).context(format!(
                    "{} ({remaining} bytes to the end of the input)",
                    describe(index, offset)
                ))))
            }
        }
    }
}
