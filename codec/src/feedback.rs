//! Error feedback: what a codec encodes is `acc = e + x`, and what it could
//! not send, `acc - decoded`, stays in `e` for the next tensor.

use crate::error::EncodeError;
use crate::quantize;

/// The values a codec quantizes (`x + e` with error feedback, `x` alone
/// without) and the place their residuals go.
///
/// `acc` is recomputed on every read rather than stored, so the error buffer
/// changes only through [`Accumulator::settle`], after the codec has checked
/// its input.
pub struct Accumulator<'a> {
    x: &'a [f32],
    e: Option<&'a mut [f32]>,
}

impl<'a> Accumulator<'a> {
    /// `e`, if given, has the length of `x`.
    pub fn new(x: &'a [f32], e: Option<&'a mut [f32]>) -> Self {
        debug_assert!(e.as_ref().is_none_or(|e| e.len() == x.len()));
        Accumulator { x, e }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.x.len()
    }

    /// Whether the tensor is empty.
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// The value to encode at `i`.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        match &self.e {
            Some(e) => self.x[i] + e[i],
            None => self.x[i],
        }
    }

    /// Records that `sent` was sent for position `i`: `e[i] = acc - sent`.
    #[inline(always)]
    pub fn settle(&mut self, i: usize, sent: f32) {
        if let Some(e) = &mut self.e {
            e[i] = self.x[i] + e[i] - sent;
        }
    }

    /// Records that every value was sent exactly: the error buffer becomes
    /// zero. (Not `acc - acc`, which is NaN for a NaN or an infinity.)
    pub fn settle_all_exactly(&mut self) {
        if let Some(e) = &mut self.e {
            e.fill(0.0);
        }
    }

    /// `max|acc|`, or [`EncodeError::NonFinite`] if any value is NaN or infinite.
    pub fn max_abs(&self) -> Result<f32, EncodeError> {
        let m = quantize::max_abs(self.x, self.e.as_deref());
        if m.finite {
            Ok(m.max)
        } else {
            Err(EncodeError::NonFinite)
        }
    }

    /// The position and value of the first `acc` whose magnitude is `max`.
    pub fn find_magnitude(&self, max: f32) -> (usize, f32) {
        (0..self.len())
            .map(|i| (i, self.get(i)))
            .find(|(_, a)| a.abs() == max)
            .unwrap_or((0, max))
    }

    /// The raw parts, for codecs with their own fused loops.
    pub fn into_parts(self) -> (&'a [f32], Option<&'a mut [f32]>) {
        (self.x, self.e)
    }
}
