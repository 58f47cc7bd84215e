//! Push contexts: gradients, held by a worker and asked for by a parameter
//! task. The worker-side sidecar keeps one error-feedback encoder per
//! (requesting task, tensor) and sends each gradient as a push envelope:
//! one frame, and with [refinement](super::refine) up to
//! [`MAX_PUSH_FRAMES`]` - 1` more frames of the error the earlier ones
//! left. The requesting side needs no state: [`decode_push`] adds the
//! frames up.

use thiserror::Error;
use tlc_codec::{
    Codec, DecodeError, EncodeError, Encoder, EntropyStage, Feedback, FrameHeader, Limits, Params,
};

use super::refine::{set_frame_count, sum_of_squares, Refinement};
use super::regime::RegimeDetector;
use super::table::ContextMemory;
use tlc_wire::envelope::{
    Envelope, EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN, MAX_PUSH_FRAMES,
};

/// Running totals of one push context, for metrics and the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PushCounters {
    /// Gradients encoded.
    pub frames: u64,
    /// Refinement frames sent after them (passes over the error buffer).
    pub refinements: u64,
    /// Their size as f32, in bytes.
    pub raw_bytes: u64,
    /// What was sent instead (envelopes, headers included), in bytes.
    pub wire_bytes: u64,
    /// Gradients the codec refused (sent uncompressed by the caller).
    pub failures: u64,
    /// The scale of the last frame (3LC's `M`, TernGrad's scale, int8's
    /// step), if its codec has one.
    pub last_scale: Option<f32>,
    /// The largest gradient (L2) encoded so far, where a peak-lag bound
    /// asked for it to be measured (0 otherwise).
    pub peak_l2: f64,
    /// Where the fidelity controller is on: whether the stream's next
    /// gradient is encoded in a critical regime (its tighter lag bound).
    pub critical: Option<bool>,
    /// Gradients encoded in a critical regime.
    pub critical_pushes: u64,
    /// Where the controller asks for it: what the requester last said of
    /// the workers' agreement on this tensor ([`crate::regime::agreement`]).
    pub agreement: Option<f64>,
}

/// What one [`PushContext::encode`] produced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushEncoded {
    /// Size of the gradient as f32, in bytes.
    pub raw_bytes: usize,
    /// Size of the envelope appended, in bytes.
    pub wire_bytes: usize,
    /// The first frame's header (codec, parameters, lengths).
    pub frame: FrameHeader,
    /// Frames in the envelope: 1, plus the refinements.
    pub frames: u32,
    /// Encoded in a critical regime (under the fidelity controller).
    pub critical: bool,
}

/// The error-feedback context of one gradient stream.
#[derive(Debug, Clone)]
pub struct PushContext {
    encoder: Encoder,
    counters: PushCounters,
    /// A zero tensor: encoding it through the error buffer encodes the
    /// buffer alone (a refinement). Allocated at the first refinement.
    zeros: Vec<f32>,
    /// `‖g‖₂²` of the largest gradient encoded so far, forgotten at the
    /// bound's half-life (kept where a peak-lag bound is set).
    peak_squares: f64,
    /// The fidelity controller's view of the stream (kept where the
    /// refinement has one on).
    regime: RegimeDetector,
}

impl PushContext {
    /// A fresh context: empty error buffer, counters at zero.
    pub fn new(codec: Codec, feedback: Feedback) -> PushContext {
        PushContext {
            encoder: Encoder::new(codec, feedback),
            counters: PushCounters::default(),
            zeros: Vec::new(),
            peak_squares: 0.0,
            regime: RegimeDetector::default(),
        }
    }

    /// Takes the requester's word on how much the workers' gradients of
    /// this tensor agree, for the next gradient's regime (`None`: it said
    /// nothing).
    pub fn hear_agreement(&mut self, agreement: Option<f64>) {
        self.regime.hear(agreement);
    }

    /// Whether the frames from now on may carry the entropy stage.
    pub fn set_entropy_stage(&mut self, stage: EntropyStage) {
        self.encoder.set_entropy_stage(stage);
    }

    /// Encodes one gradient through the error buffer and appends a push
    /// envelope to `out`: the gradient's frame, then, while `refine` asks
    /// for it (and the context has an error buffer), frames of what is
    /// left in the buffer.
    ///
    /// `refine.peak_lag` bounds the buffer against the stream's largest
    /// gradient as well (see [`Refinement::peak_lag`]).
    ///
    /// `codec` is the codec configured now: a change (of `s`, say) applies
    /// to this gradient and keeps the pending error. On error the context
    /// and `out` are as they were (only the failure counter moves), and the
    /// caller passes the gradient through uncompressed.
    pub fn encode(
        &mut self,
        values: &[f32],
        codec: Codec,
        refine: Refinement,
        fallback_token: u64,
        out: &mut Vec<u8>,
    ) -> Result<PushEncoded, EncodeError> {
        let previous = *self.encoder.codec();
        if previous != codec {
            self.encoder.set_codec(codec);
        }
        let start = out.len();
        EnvelopeHeader::push(fallback_token).write(out);
        let frame = match self.encoder.encode(values, out) {
            Ok(frame) => frame,
            Err(err) => {
                out.truncate(start);
                self.encoder.set_codec(previous);
                self.counters.failures += 1;
                return Err(err);
            }
        };
        let (frames, critical) = self.refine(values, refine, fallback_token, start, out);
        let encoded = PushEncoded {
            raw_bytes: std::mem::size_of_val(values),
            wire_bytes: out.len() - start,
            frame,
            frames,
            critical,
        };
        let c = &mut self.counters;
        c.frames += 1;
        c.refinements += u64::from(frames - 1);
        c.raw_bytes += encoded.raw_bytes as u64;
        c.wire_bytes += encoded.wire_bytes as u64;
        c.last_scale = scale_of(&frame.params);
        c.peak_l2 = self.peak_squares.sqrt();
        c.critical = refine
            .regimes
            .is_on()
            .then(|| self.regime.critical_under(&refine.regimes));
        c.critical_pushes = self.regime.critical_pushes();
        c.agreement = self
            .regime
            .heard()
            .filter(|_| refine.regimes.asks_agreement());
        Ok(encoded)
    }

    /// Appends refinement frames to the envelope that starts at
    /// `out[start]` while `refine` asks for them, and rewrites its header's
    /// frame count. Returns the envelope's frame count and whether the
    /// stream was critical (the controller's bound). A refinement the
    /// codec refuses ends the refinements; the frames before it stand.
    fn refine(
        &mut self,
        gradient: &[f32],
        refine: Refinement,
        fallback_token: u64,
        start: usize,
        out: &mut Vec<u8>,
    ) -> (u32, bool) {
        let refine = Refinement {
            max_passes: refine.max_passes.min(MAX_PUSH_FRAMES),
            ..refine
        };
        if self.encoder.feedback() == Feedback::Off || refine.max_passes <= 1 {
            return (1, false);
        }
        let mut frames = 1;
        let gradient_squares = sum_of_squares(gradient.iter().copied());
        let mut residual = sum_of_squares(self.encoder.residual().iter().copied());
        // The peak is kept while either bound may need it, so that a
        // stream turning critical has its recent peak, not a stale one.
        let tracks_peak = refine.peak_lag.is_finite() || refine.regimes.is_on();
        let critical = refine.regimes.is_on()
            && self
                .regime
                .observe(&refine.regimes, gradient_squares, residual);
        let refine = Refinement {
            peak_lag: refine.regimes.lag(refine.peak_lag, critical),
            ..refine
        };
        if tracks_peak {
            self.peak_squares = refine.next_peak(self.peak_squares, gradient_squares);
        }
        loop {
            if !refine.another_pass_with_peak(frames, residual, gradient_squares, self.peak_squares)
            {
                break;
            }
            self.zeros.resize(gradient.len(), 0.0);
            // The error buffer plus a zero gradient: a frame of the error
            // alone, which the buffer then loses.
            let goal = refine.pass_goal_within_peak(gradient_squares, self.peak_squares);
            if self.encoder.encode_pass(&self.zeros, goal, out).is_err() {
                break;
            }
            frames += 1;
            residual = sum_of_squares(self.encoder.residual().iter().copied());
        }
        if frames > 1 {
            let mut header = EnvelopeHeader::push(fallback_token);
            set_frame_count(&mut header, frames, start, out);
        }
        (frames, critical)
    }

    /// The codec the last gradient was encoded with (or the initial one).
    pub fn codec(&self) -> Codec {
        *self.encoder.codec()
    }

    /// Running totals.
    pub fn counters(&self) -> PushCounters {
        self.counters
    }

    /// The error buffer: what has been accumulated but not sent yet.
    pub fn residual(&self) -> &[f32] {
        self.encoder.residual()
    }

    /// The error buffer's L2 norm. A pass over the buffer: computed only
    /// when asked (the admin API), never on the encode path.
    pub fn residual_l2(&self) -> f64 {
        l2(self.encoder.residual())
    }
}

/// Encodes a tensor on its own, without error feedback or any state, as a
/// push envelope: how sparse and unclassified tensors travel, in either
/// direction. The requesting side decodes it with [`decode_push`].
pub fn encode_stateless(
    values: &[f32],
    codec: Codec,
    entropy: EntropyStage,
    fallback_token: u64,
    out: &mut Vec<u8>,
) -> Result<PushEncoded, EncodeError> {
    let mut context = PushContext::new(codec, Feedback::Off);
    context.set_entropy_stage(entropy);
    context.encode(values, codec, Refinement::OFF, fallback_token, out)
}

impl ContextMemory for PushContext {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<PushContext>()
            + std::mem::size_of_val(self.encoder.residual())
            + 4 * self.zeros.capacity()
    }
}

/// L2 norm, accumulated in f64 so that long tensors do not lose precision.
pub fn l2(values: &[f32]) -> f64 {
    sum_of_squares(values.iter().copied()).sqrt()
}

/// The scale a frame's values are multiples of (3LC's and TernGrad's M,
/// int8's step), if its codec has one.
pub fn scale_of(params: &Params) -> Option<f32> {
    match *params {
        Params::ThreeLc { scale, .. } | Params::TernGrad { scale } => Some(scale),
        Params::Int8 { step } => Some(step),
        _ => None,
    }
}

/// Why a push envelope could not be decoded.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PushError {
    /// The envelope itself is malformed.
    #[error("bad push envelope: {0}")]
    Envelope(#[from] EnvelopeError),
    /// A well-formed envelope of another kind.
    #[error("expected a push envelope, got a {0}")]
    NotAPush(Kind),
    /// The frame passed its checks but its payload does not decode.
    #[error("push frame does not decode: {0}")]
    Decode(#[from] DecodeError),
}

/// What [`decode_push`] read besides the values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushDecoded {
    /// The token to ask the sender for the original response with.
    pub fallback_token: u64,
    /// The frame's header.
    pub frame: FrameHeader,
    /// Size of the envelope, in bytes.
    pub wire_bytes: usize,
}

/// Decodes a push envelope into `out` (resized to the gradient's length,
/// which `limits` bounds). On error `out`'s contents are unspecified and
/// the caller falls back to the original response.
pub fn decode_push(
    envelope: &[u8],
    limits: &Limits,
    out: &mut Vec<f32>,
) -> Result<PushDecoded, PushError> {
    let parsed = Envelope::parse(envelope, limits)?;
    if parsed.header.kind != Kind::Push {
        return Err(PushError::NotAPush(parsed.header.kind));
    }
    // Envelope::parse guarantees 1..=MAX_PUSH_FRAMES frames of one length.
    let Some(frame) = parsed.frames().first() else {
        return Err(PushError::Envelope(EnvelopeError::Truncated {
            needed: HEADER_LEN + 1,
            available: envelope.len(),
        }));
    };
    // Bounded by limits.max_elements in Frame::parse.
    let n = usize::try_from(frame.header.elements).map_err(|_| DecodeError::TooManyElements {
        elements: frame.header.elements,
        limit: limits.max_elements,
    })?;
    out.clear();
    out.resize(n, 0.0);
    frame.decode_into(out)?;
    let refinements = &parsed.frames()[1..];
    if !refinements.is_empty() {
        let mut refinement = vec![0f32; n];
        for frame in refinements {
            frame.decode_into(&mut refinement)?;
            for (v, r) in out.iter_mut().zip(&refinement) {
                *v += *r;
            }
        }
    }
    Ok(PushDecoded {
        fallback_token: parsed.header.fallback_token,
        frame: frame.header,
        wire_bytes: envelope.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlc_codec::Sparsity;
    use tlc_wire::envelope::write_envelope;

    fn three_lc(s: f32) -> Codec {
        Codec::ThreeLc {
            sparsity: Sparsity::new(s).unwrap(),
        }
    }

    /// A deterministic gradient-like tensor for step `t`.
    fn gradient(n: usize, t: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = (i * 7919 + t * 104_729) % 1000;
                (x as f32 / 1000.0 - 0.5) * 0.01
            })
            .collect()
    }

    #[test]
    fn error_feedback_holds_through_envelopes() {
        // Over many steps: sum of what the receiver decoded plus the
        // sender's residual equals the sum of the gradients.
        let n = 1000;
        let mut ctx = PushContext::new(three_lc(1.0), Feedback::On);
        let limits = Limits::default();
        let mut sent = vec![0f64; n];
        let mut received = vec![0f64; n];
        let mut decoded = Vec::new();
        for t in 0..40 {
            let g = gradient(n, t);
            let before: Vec<f32> = if ctx.residual().is_empty() {
                vec![0.0; n]
            } else {
                ctx.residual().to_vec()
            };
            let mut wire = Vec::new();
            let codec = three_lc(if t < 20 { 1.0 } else { 1.5 });
            let out = ctx
                .encode(&g, codec, Refinement::OFF, t as u64, &mut wire)
                .unwrap();
            assert_eq!(out.wire_bytes, wire.len());
            assert_eq!(out.raw_bytes, 4 * n);
            let got = decode_push(&wire, &limits, &mut decoded).unwrap();
            assert_eq!(got.fallback_token, t as u64);
            assert_eq!(got.frame, out.frame);
            // Per step: decoded + e_after == g + e_before (up to f32 rounding).
            for i in 0..n {
                let lhs = decoded[i] + ctx.residual()[i];
                let rhs = g[i] + before[i];
                assert!(
                    (lhs - rhs).abs() <= 1e-6,
                    "step {t} value {i}: {lhs} vs {rhs}"
                );
                sent[i] += f64::from(g[i]);
                received[i] += f64::from(decoded[i]);
            }
        }
        for i in 0..n {
            let gap = sent[i] - received[i] - f64::from(ctx.residual()[i]);
            assert!(gap.abs() < 1e-5, "value {i}: gap {gap}");
        }
        let c = ctx.counters();
        assert_eq!(c.frames, 40);
        assert_eq!(c.raw_bytes, 40 * 4000);
        assert!(
            c.wire_bytes < c.raw_bytes / 8,
            "3LC should be far below f32: {c:?}"
        );
        assert!(c.last_scale.unwrap() > 0.0);
        assert_eq!(ctx.codec(), three_lc(1.5));
        assert!(ctx.residual_l2() > 0.0);
    }

    #[test]
    fn a_codec_change_keeps_the_residual() {
        let mut ctx = PushContext::new(three_lc(1.0), Feedback::On);
        ctx.encode(
            &gradient(50, 0),
            three_lc(1.0),
            Refinement::OFF,
            0,
            &mut Vec::new(),
        )
        .unwrap();
        let residual = ctx.residual().to_vec();
        assert!(residual.iter().any(|&e| e != 0.0));
        // Encoding zeros with s = 1.5 sends part of the pending error.
        let mut wire = Vec::new();
        ctx.encode(&[0.0; 50], three_lc(1.5), Refinement::OFF, 0, &mut wire)
            .unwrap();
        let mut decoded = Vec::new();
        decode_push(&wire, &Limits::default(), &mut decoded).unwrap();
        for i in 0..50 {
            assert!((decoded[i] + ctx.residual()[i] - residual[i]).abs() <= 1e-7);
        }
    }

    #[test]
    fn an_encode_error_changes_nothing() {
        let mut ctx = PushContext::new(three_lc(1.0), Feedback::On);
        let mut wire = vec![0xaa];
        ctx.encode(
            &gradient(20, 0),
            three_lc(1.0),
            Refinement::OFF,
            0,
            &mut wire,
        )
        .unwrap();
        let residual = ctx.residual().to_vec();
        let counters = ctx.counters();
        let len = wire.len();
        let mut bad = gradient(20, 1);
        bad[3] = f32::NAN;
        let err = ctx
            .encode(&bad, three_lc(1.5), Refinement::OFF, 0, &mut wire)
            .unwrap_err();
        assert_eq!(err, EncodeError::NonFinite);
        assert_eq!(wire.len(), len);
        assert_eq!(ctx.residual(), residual);
        assert_eq!(ctx.codec(), three_lc(1.0));
        assert_eq!(
            ctx.counters(),
            PushCounters {
                failures: 1,
                ..counters
            }
        );
    }

    #[test]
    fn decode_push_rejects_hostile_input() {
        let limits = Limits { max_elements: 100 };
        let mut out = Vec::new();
        let mut wire = Vec::new();
        let mut ctx = PushContext::new(Codec::None, Feedback::Off);
        ctx.encode(&[1.0; 10], Codec::None, Refinement::OFF, 0, &mut wire)
            .unwrap();
        assert!(decode_push(&wire, &limits, &mut out).is_ok());
        assert_eq!(out, [1.0; 10]);

        assert!(matches!(
            decode_push(&wire[..wire.len() - 3], &limits, &mut out),
            Err(PushError::Envelope(EnvelopeError::Frame { .. }))
        ));
        assert!(matches!(
            decode_push(
                b"garbage that is long enough to hold a header..........",
                &limits,
                &mut out
            ),
            Err(PushError::Envelope(EnvelopeError::BadMagic(_)))
        ));
        // Too many values for the limits.
        let mut big = Vec::new();
        ctx.encode(&[0.5; 101], Codec::None, Refinement::OFF, 0, &mut big)
            .unwrap();
        assert!(matches!(
            decode_push(&big, &limits, &mut out),
            Err(PushError::Envelope(EnvelopeError::Frame {
                source: DecodeError::TooManyElements {
                    elements: 101,
                    limit: 100
                },
                ..
            }))
        ));
        // A keyframe is not a push.
        let mut key = Vec::new();
        let frame = wire[HEADER_LEN..].to_vec();
        write_envelope(&EnvelopeHeader::keyframe(0, 1, 1), &[frame], &mut key).unwrap();
        assert_eq!(
            decode_push(&key, &limits, &mut out).unwrap_err(),
            PushError::NotAPush(Kind::Keyframe)
        );
    }

    #[test]
    fn memory_counts_the_residual() {
        let mut ctx = PushContext::new(three_lc(1.0), Feedback::On);
        let empty = ctx.memory_bytes();
        ctx.encode(
            &[1.0; 1000],
            three_lc(1.0),
            Refinement::OFF,
            0,
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(ctx.memory_bytes(), empty + 4000);
    }
}
