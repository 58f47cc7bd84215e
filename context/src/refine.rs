//! Bounded error for the contexts that remember: how far a lossy codec's
//! memory may lag behind the tensor before another pass is sent.
//!
//! 3LC keeps what it did not send (a push context's error buffer, the
//! `V - R` of a pull replica) and sends it later. With `M = max|acc| * s`
//! one pass moves only the elements above `M / 2`; when a few large
//! elements set `M`, the bulk of a tensor waits several steps. Synchronous
//! training (gradients accumulated, then applied together) tolerates that
//! lag; asynchronous training, where each gradient is applied on arrival
//! and workers read a model that moves between their reads, does not: the
//! lag adds to the staleness, momentum amplifies it, and the job diverges
//! (TF1 async MLP: 97% without tlcd, 17% through it; see README).
//!
//! A refinement is one more 3LC pass over what is left, sent with the
//! first: for a pull as another version in the same chain, for a push as
//! another frame of the envelope, which the receiver adds up. Passes stop
//! once the remaining error is at most `target` times the tensor's norm, or
//! after `max_passes`. Every pass is a 3LC frame; passes after the first
//! use 3LC's own scale or pick `M` toward the target ([`PassScale`]; the
//! sidecar's policy says which, per direction and training). Toward the
//! target, passes stop close to it instead of below it, which is where
//! most of the bytes it saves come from: the same bound then lets the
//! replica drift further. Measured (docs/COMPRESSION.md, "Refinement"):
//! TF2 ParameterServerStrategy pulls 16.7–19.8x -> 20.1–23.3x, but
//! accuracy goes with it (the TF1 async MLP 7.5 points in one run of nine;
//! the synchronous harness MLP 0.4 on average over six seeds, under
//! today's push bounds; docs/FIDELITY.md), so dense pulls default to
//! 3LC's scale.

use crate::regime::Regimes;
use tlc_wire::envelope::{EnvelopeHeader, HEADER_LEN};

/// How a refinement pass (the second and later) picks its 3LC scale `M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PassScale {
    /// `M = max|acc| * s`, as the first pass: each pass ends below the
    /// target, often well below.
    #[default]
    Max,
    /// `M` toward the target (`tlc3::toward`): passes stop close to it,
    /// with fewer bytes.
    Toward,
}

/// How far a context may lag: a relative L2 target and a pass budget.
///
/// For a pull, the error is `‖V − R‖₂ / ‖V‖₂` (the replica's drift from
/// the model); for a push, `‖e‖₂ / ‖g‖₂` (the error buffer against the
/// gradient just encoded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refinement {
    /// Stop refining once the relative error is at most this.
    pub target: f64,
    /// Passes at most, the first included; 1 turns refinement off.
    pub max_passes: u32,
    /// How passes after the first pick their scale.
    pub scale: PassScale,
    /// Further passes also while the error is above this times the largest
    /// change the context has been asked to carry (`inf`: no such bound;
    /// dense contexts only, rows ignore it). For a push the change is the
    /// gradient, `‖e‖₂ ≤ peak_lag · max ‖g‖₂`; for a pull it is the update,
    /// `‖V − R‖₂ ≤ peak_lag · max ‖V − R₀‖₂` with `R₀` the replica before
    /// it. While changes are as large as they have been (early in
    /// training) that is a bound relative to the change, as tight as
    /// `peak_lag`; as they decay, the same absolute lag is a growing
    /// multiple of them and 3LC's single pass meets it alone. What the
    /// model lags behind stays below what one early step moved it,
    /// without a step count to choose.
    pub peak_lag: f64,
    /// How fast the remembered peak forgets, in changes (gradients pushed,
    /// updates pulled): each new change first halves the peak's L2 over
    /// this many changes, then raises it to the change if larger (`inf`:
    /// never forgets, the largest change ever). The largest change ever
    /// is a bound that loosens as training goes on: where gradients and
    /// updates shrink (a decaying rate, batch norm's growing kernels),
    /// `peak_lag` times the first steps' change is many of today's, and
    /// the memory lags that many steps behind. A peak that forgets keeps
    /// the lag a few of today's changes, at the bytes of the passes that
    /// needs.
    pub peak_half_life: f64,
    /// Pushes only: the fidelity controller, which tightens `peak_lag`
    /// while a gradient stream is in a critical regime ([`crate::regime`]).
    pub regimes: Regimes,
}

impl Refinement {
    /// One pass, whatever the error: 3LC as the paper runs it.
    pub const OFF: Refinement = Refinement {
        target: f64::INFINITY,
        max_passes: 1,
        scale: PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: Regimes::OFF,
    };

    /// Whether another pass is due after `passes_done` passes left a
    /// relative error of `error`. NaN (a zero tensor with error) refines.
    pub fn another_pass(&self, passes_done: u32, error: f64) -> bool {
        passes_done < self.max_passes && (error > self.target || error.is_nan())
    }

    /// [`another_pass`](Self::another_pass), with the peak bound too:
    /// `error_squares` is `Σ err²`, `reference_squares` the change's own
    /// `Σ v²` (the relative error is against it) and `peak_squares` the
    /// largest such change so far.
    pub(crate) fn another_pass_with_peak(
        &self,
        passes_done: u32,
        error_squares: f64,
        reference_squares: f64,
        peak_squares: f64,
    ) -> bool {
        self.another_pass(passes_done, relative_to(error_squares, reference_squares))
            || (passes_done < self.max_passes
                && self.peak_lag.is_finite()
                && relative_to(error_squares, peak_squares) > self.peak_lag)
    }

    /// The peak's `Σ v²` after a change whose `Σ v²` is `change_squares`:
    /// the old peak decayed by one change of [`peak_half_life`], or the
    /// change if larger. A change that is not finite leaves it as it was.
    ///
    /// [`peak_half_life`]: Self::peak_half_life
    pub(crate) fn next_peak(&self, peak_squares: f64, change_squares: f64) -> f64 {
        if !change_squares.is_finite() {
            return peak_squares;
        }
        // Squares decay at twice the L2's rate: 2^(-2/h) per change.
        let kept = if self.peak_half_life.is_finite() {
            peak_squares * (-2.0 / self.peak_half_life).exp2()
        } else {
            peak_squares
        };
        kept.max(change_squares)
    }

    /// The goal of a refinement pass against a reference whose `Σ v²` is
    /// `reference_squares` (for `Encoder::encode_pass`): with
    /// [`PassScale::Toward`], the squared L2 error the pass may leave, 0
    /// (remove as much as one pass can) when that is not a finite number
    /// (an infinite target, a zero reference); with [`PassScale::Max`],
    /// none.
    pub fn pass_goal(&self, reference_squares: f64) -> Option<f64> {
        self.pass_goal_within_peak(reference_squares, f64::INFINITY)
    }

    /// [`pass_goal`](Self::pass_goal) where the peak bound applies too
    /// (`peak_squares`, the peak's `Σ v²`): the pass aims at whichever of
    /// the two bounds is tighter, so that a pass toward a peak bound stops
    /// near it instead of removing all it can.
    pub(crate) fn pass_goal_within_peak(
        &self,
        reference_squares: f64,
        peak_squares: f64,
    ) -> Option<f64> {
        (self.scale == PassScale::Toward).then(|| {
            let against_reference = self.target * self.target * reference_squares;
            let against_peak = if self.peak_lag.is_finite() {
                self.peak_lag * self.peak_lag * peak_squares
            } else {
                f64::INFINITY
            };
            let allowed = against_reference.min(against_peak);
            if allowed.is_finite() {
                allowed
            } else {
                0.0
            }
        })
    }
}

/// `Σ v²`, accumulated in f64 so that long tensors keep their precision.
pub(crate) fn sum_of_squares(values: impl Iterator<Item = f32>) -> f64 {
    values.map(|v| f64::from(v) * f64::from(v)).sum()
}

/// `‖error‖₂ / ‖reference‖₂` given their squares (see
/// [`sum_of_squares`]): 0 when both are zero, infinite for an error
/// against a zero reference.
pub(crate) fn relative_to(error_squares: f64, reference_squares: f64) -> f64 {
    if reference_squares == 0.0 {
        return if error_squares == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
    }
    (error_squares / reference_squares).sqrt()
}

/// Rewrites the frame count of the envelope whose header starts at
/// `out[start]` to `frames`, once its refinement passes are appended.
pub(crate) fn set_frame_count(
    header: &mut EnvelopeHeader,
    frames: u32,
    start: usize,
    out: &mut [u8],
) {
    header.frame_count = frames;
    let mut bytes = Vec::with_capacity(HEADER_LEN);
    header.write(&mut bytes);
    out[start..start + HEADER_LEN].copy_from_slice(&bytes);
}

#[cfg(test)]
mod tests;
