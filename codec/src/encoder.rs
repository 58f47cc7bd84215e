//! An encoding context: one codec, its error buffer and its frame counter,
//! for one stream of same-shaped tensors (one tensor of one peer, say).

use crate::codec::Codec;
use crate::dispatch::{self, Scratch};
use crate::entropy::{self, EntropyStage};
use crate::error::EncodeError;
use crate::frame::{FrameHeader, FrameWriter};
use crate::terngrad;

/// Whether an encoder carries quantization error from one tensor to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// Keep an error buffer: what a tensor could not send is added to the next.
    On,
    /// Encode each tensor on its own.
    Off,
}

impl Feedback {
    /// The default for a codec: on for 3LC, 1-bit and top-k, off otherwise.
    pub fn default_for(codec: &Codec) -> Feedback {
        if codec.id().feedback_by_default() {
            Feedback::On
        } else {
            Feedback::Off
        }
    }
}

/// One encoding context.
///
/// ```
/// use tlc_codec::{Codec, Encoder, Feedback, Limits, Sparsity, decode};
///
/// let mut encoder = Encoder::new(Codec::ThreeLc { sparsity: Sparsity::new(1.5)? }, Feedback::On);
/// let mut frame = Vec::new();
/// encoder.encode(&[0.5, -1.0, 0.25, 0.0, 2.0], &mut frame)?;
/// let mut values = Vec::new();
/// decode(&frame, &Limits::default(), &mut values)?;
/// assert_eq!(values.len(), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Encoder {
    codec: Codec,
    feedback: Feedback,
    residual: Vec<f32>,
    frames: u64,
    sample: Vec<f32>,
    entropy: EntropyStage,
    coded: Vec<u8>,
}

impl Encoder {
    /// A fresh context (empty error buffer, frame counter at zero).
    pub fn new(codec: Codec, feedback: Feedback) -> Encoder {
        Encoder {
            codec,
            feedback,
            residual: Vec::new(),
            frames: 0,
            sample: Vec::new(),
            entropy: EntropyStage::Off,
            coded: Vec::new(),
        }
    }

    /// Whether payloads go through the entropy stage ([`EntropyStage::Off`]
    /// for a new encoder).
    pub fn entropy_stage(&self) -> EntropyStage {
        self.entropy
    }

    /// Turns the entropy stage on or off from the next tensor on. With
    /// [`EntropyStage::Zstd`] a frame uses the stage only when that makes
    /// it smaller, and a reader built before the stage cannot read such a
    /// frame (see [`EntropyStage`]). The error buffer is not affected: the
    /// stage is lossless.
    pub fn set_entropy_stage(&mut self, stage: EntropyStage) {
        self.entropy = stage;
    }

    /// The codec the next tensor will be encoded with.
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// Whether error feedback is on.
    pub fn feedback(&self) -> Feedback {
        self.feedback
    }

    /// Changes the codec or its settings for the next tensor; the error
    /// buffer is kept, so a change of `s` does not lose pending error.
    pub fn set_codec(&mut self, codec: Codec) {
        self.codec = codec;
    }

    /// The error buffer: what has been accumulated but not yet sent. Empty
    /// until the first tensor, and always empty with feedback off.
    pub fn residual(&self) -> &[f32] {
        &self.residual
    }

    /// Number of frames encoded so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Forgets the error buffer and restarts the frame counter.
    pub fn reset(&mut self) {
        self.residual.clear();
        self.frames = 0;
    }

    /// Encodes one tensor and appends its frame to `out`.
    ///
    /// With the entropy stage on ([`set_entropy_stage`](Self::set_entropy_stage))
    /// the payload is zstd-coded when that makes the frame smaller; the
    /// codec's output underneath, and so the error buffer, is the same.
    ///
    /// A tensor whose length differs from the previous one starts a new
    /// error buffer (a shape change resets the context). On error the
    /// context and `out` are as they were, so the caller can send the
    /// tensor uncompressed and carry on.
    pub fn encode(
        &mut self,
        values: &[f32],
        out: &mut Vec<u8>,
    ) -> Result<FrameHeader, EncodeError> {
        self.encode_pass(values, None, out)
    }

    /// Encodes one tensor as a refinement pass over what earlier frames
    /// left. Given a goal, 3LC chooses its scale to leave at most
    /// `allowed_squared_error` (`Σ (acc − decoded)²`) with the fewest
    /// nonzero trits instead of `max|acc| * s`
    /// ([`tlc3::toward`](crate::tlc3::toward)); without one, and for other
    /// codecs, this is [`encode`](Self::encode).
    pub fn encode_pass(
        &mut self,
        values: &[f32],
        allowed_squared_error: Option<f64>,
        out: &mut Vec<u8>,
    ) -> Result<FrameHeader, EncodeError> {
        let feedback = self.feedback == Feedback::On;
        // A new shape starts from a fresh buffer, swapped in only once the
        // tensor has encoded, so a failed tensor leaves the old one alone.
        let reshaped = feedback && self.residual.len() != values.len();
        let mut fresh = Vec::new();
        let residual = if reshaped {
            fresh.resize(values.len(), 0.0);
            &mut fresh
        } else {
            &mut self.residual
        };
        let start = out.len();
        let writer = FrameWriter::begin(out, self.codec.id());
        let seed = match self.codec {
            Codec::TernGrad { seed } => seed,
            _ => 0,
        };
        let scratch = Scratch {
            stream_key: terngrad::stream_key(seed, self.frames),
            sample: &mut self.sample,
            allowed_squared_error,
        };
        let e = feedback.then_some(residual.as_mut_slice());
        let stage = self.entropy;
        let coded = &mut self.coded;
        let result = dispatch::encode(&self.codec, values, e, scratch, out).and_then(|params| {
            let raw_len = match stage {
                EntropyStage::Off => None,
                EntropyStage::Zstd => entropy::encode(out, writer.payload_start(), coded),
            };
            writer.finish(out, params, feedback, raw_len, values.len())
        });
        match result {
            Ok(header) => {
                if reshaped {
                    self.residual = fresh;
                }
                self.frames += 1;
                Ok(header)
            }
            Err(err) => {
                out.truncate(start);
                Err(err)
            }
        }
    }
}
