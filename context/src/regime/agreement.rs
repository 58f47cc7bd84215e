//! How much the workers' gradients of one tensor agree, measured where
//! they meet: the parameter task's sidecar, which decodes every worker's
//! push of a step.
//!
//! A synchronous step applies the mean of the workers' gradients. Where
//! they agree (a consistent direction: a model leaving a plateau, a fast
//! early descent), what error feedback holds back delays the step that
//! matters; where they barely agree (noise dominates: convergence), it
//! delays noise. Of the signals tried for the fidelity controller, this
//! is the one that told the zoo's conv net leaving its plateau (cosine
//! 0.4–0.6 between two workers' true gradients) from the models that pay
//! for a tight bound and gain nothing from it (never above 0.21). The
//! gradient norm's change, the error buffer against the gradient and the
//! backlog's alignment with the next gradient did not (docs/FIDELITY.md).
//! A worker's gradient against its own last one does not either: the
//! model moves between the two, and on a momentum-driven conv net they
//! are near orthogonal while the workers' agree at 0.5.
//!
//! The meter pairs pushes by round, not by step id (each worker's session
//! numbers its own steps): a round is the pushes of distinct holders
//! since the round began, and a holder pushing again closes it. A
//! synchronous step is one round. Per round, with `S` the sum of its
//! pushes, the agreement is `2 Σ_{i<j} g_i·g_j / ((n − 1) Σ ‖g_i‖²)`:
//! the cosine for two workers of equal norm, kept incrementally as each
//! push is added to `S`, so the meter holds one tensor-sized buffer
//! whatever the number of workers. What it reports is the mean over the
//! last `window` rounds (a running mean, then a moving average of that
//! length).
//!
//! The pushes are decoded ones: 3LC's quantization makes them agree less
//! than the true gradients (about a quarter as much, in an offline check),
//! so the threshold the holder compares with is set for decoded pushes.

use crate::table::ContextMemory;

/// Holders a round tracks; pushes from more are left out of it.
const MAX_HOLDERS: usize = 256;

/// One tensor's meter on the requester's side.
#[derive(Debug, Clone, Default)]
pub struct AgreementMeter {
    /// The sum of the round's pushes.
    sum: Vec<f32>,
    /// The holders that pushed in this round, by a hash of their name.
    holders: Vec<u64>,
    /// `Σ_{i<j} g_i·g_j` over the round's pushes.
    cross: f64,
    /// `Σ ‖g_i‖²` over the round's pushes.
    squares: f64,
    /// Rounds measured (capped at the window).
    rounds: u32,
    /// Their mean agreement; `None` before the first round of two.
    mean: Option<f64>,
}

impl AgreementMeter {
    /// Counts the push of `values` by the holder `holder` (a hash of its
    /// name); a round closed by it moves the mean over `window` rounds.
    /// A push of another length than the round's starts a new round.
    pub fn observe(&mut self, holder: u64, values: &[f32], window: u32) {
        if self.holders.contains(&holder) || values.len() != self.sum.len() {
            self.close_round(window);
            self.sum.clear();
            self.sum.extend_from_slice(values);
            self.holders.clear();
            self.holders.push(holder);
            self.cross = 0.0;
            self.squares = sum_of_squares(values);
            return;
        }
        if self.holders.len() >= MAX_HOLDERS {
            return;
        }
        let mut dot = 0.0f64;
        let mut squares = 0.0f64;
        for (sum, &v) in self.sum.iter_mut().zip(values) {
            dot += f64::from(*sum) * f64::from(v);
            squares += f64::from(v) * f64::from(v);
            *sum += v;
        }
        self.cross += dot;
        self.squares += squares;
        self.holders.push(holder);
    }

    /// The mean agreement over the last rounds; `None` until a round of
    /// two holders or more has closed.
    pub fn agreement(&self) -> Option<f64> {
        self.mean
    }

    fn close_round(&mut self, window: u32) {
        let n = self.holders.len();
        if n < 2 || self.squares <= 0.0 || !self.cross.is_finite() || !self.squares.is_finite() {
            return;
        }
        let round = (2.0 * self.cross / ((n - 1) as f64 * self.squares)).clamp(-1.0, 1.0);
        self.rounds = self.rounds.saturating_add(1).min(window.max(1));
        let mean = self.mean.unwrap_or(round);
        self.mean = Some(mean + (round - mean) / f64::from(self.rounds));
    }
}

impl ContextMemory for AgreementMeter {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<AgreementMeter>()
            + 4 * self.sum.capacity()
            + 8 * self.holders.capacity()
    }
}

fn sum_of_squares(values: &[f32]) -> f64 {
    values.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;

    /// Feeds rounds of two holders' pushes, returns the agreement after.
    fn rounds(meter: &mut AgreementMeter, pairs: &[(&[f32], &[f32])], window: u32) -> Option<f64> {
        for (a, b) in pairs {
            meter.observe(A, a, window);
            meter.observe(B, b, window);
        }
        meter.agreement()
    }

    #[test]
    fn nothing_is_reported_before_a_round_of_two_closes() {
        let mut m = AgreementMeter::default();
        m.observe(A, &[1.0, 0.0], 20);
        m.observe(B, &[1.0, 0.0], 20);
        assert_eq!(m.agreement(), None, "the round is closed by the next push");
        m.observe(A, &[1.0, 0.0], 20);
        assert_eq!(m.agreement(), Some(1.0));
        // A holder alone never makes a round of two.
        let mut alone = AgreementMeter::default();
        for _ in 0..5 {
            alone.observe(A, &[1.0, 2.0], 20);
        }
        assert_eq!(alone.agreement(), None);
    }

    #[test]
    fn equal_norms_give_the_cosine() {
        let mut m = AgreementMeter::default();
        let half = [1.0, 0.0];
        let other = [0.5, 0.75f32.sqrt()];
        rounds(&mut m, &[(&half, &other)], 20);
        m.observe(A, &half, 20);
        let got = m.agreement().unwrap();
        assert!((got - 0.5).abs() < 1e-6, "{got}");
        // Opposed and orthogonal.
        let mut m = AgreementMeter::default();
        rounds(&mut m, &[(&[1.0, 0.0], &[-1.0, 0.0])], 20);
        m.observe(A, &[1.0, 0.0], 20);
        assert_eq!(m.agreement(), Some(-1.0));
        let mut m = AgreementMeter::default();
        rounds(&mut m, &[(&[1.0, 0.0], &[0.0, 3.0])], 20);
        m.observe(A, &[1.0, 0.0], 20);
        assert_eq!(m.agreement(), Some(0.0));
    }

    #[test]
    fn three_holders_pair_every_two() {
        // Every pair at cosine 0 but one: (a, b) = 1, (a, c) = (b, c) = 0.
        let mut m = AgreementMeter::default();
        m.observe(1, &[1.0, 0.0], 20);
        m.observe(2, &[1.0, 0.0], 20);
        m.observe(3, &[0.0, 1.0], 20);
        m.observe(1, &[1.0, 0.0], 20);
        // 2 * 1 / (2 * 3) = 1/3: the mean of the three pairs' cosines.
        let got = m.agreement().unwrap();
        assert!((got - 1.0 / 3.0).abs() < 1e-9, "{got}");
    }

    #[test]
    fn the_mean_follows_the_last_window_of_rounds() {
        let mut m = AgreementMeter::default();
        let same: (&[f32], &[f32]) = (&[1.0, 0.0], &[1.0, 0.0]);
        let apart: (&[f32], &[f32]) = (&[1.0, 0.0], &[0.0, 1.0]);
        rounds(&mut m, &[same; 10], 4);
        rounds(&mut m, &[apart; 30], 4);
        let got = m.agreement().unwrap();
        assert!(
            got < 0.01,
            "agreement {got} still remembers the first rounds"
        );
        rounds(&mut m, &[same; 30], 4);
        assert!(m.agreement().unwrap() > 0.99);
    }

    #[test]
    fn rounds_that_cannot_be_measured_are_left_out() {
        let mut m = AgreementMeter::default();
        rounds(&mut m, &[(&[1.0, 0.0], &[1.0, 0.0])], 20);
        m.observe(A, &[1.0, 0.0], 20);
        assert_eq!(m.agreement(), Some(1.0));
        // A holder alone, zero gradients, a non-finite one, a change of
        // length: none of these rounds moves the mean.
        m.observe(A, &[0.0, 0.0], 20);
        m.observe(B, &[0.0, 0.0], 20);
        m.observe(A, &[f32::NAN, 1.0], 20);
        m.observe(B, &[1.0, 0.0], 20);
        m.observe(A, &[1.0, 0.0, 1.0], 20);
        m.observe(B, &[1.0, 0.0], 20);
        m.observe(A, &[1.0, 0.0, 1.0], 20);
        assert_eq!(m.agreement(), Some(1.0));
    }

    #[test]
    fn memory_is_one_tensor_whatever_the_holders() {
        let mut m = AgreementMeter::default();
        for holder in 0..1000u64 {
            m.observe(holder, &[1.0; 1024], 20);
        }
        assert!(
            m.memory_bytes() < 4096 + 8 * 512 + 256,
            "{}",
            m.memory_bytes()
        );
    }
}
