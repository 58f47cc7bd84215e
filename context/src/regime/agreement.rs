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
//! pushes, it measures `2 Σ_{i<j} g_i·g_j / (n − 1)` against `Σ ‖g_i‖²`
//! (their ratio is the cosine for two workers of equal norm), kept
//! incrementally as each push is added to `S`, so a tensor's meter holds
//! one tensor-sized buffer whatever the number of workers.
//!
//! What is reported is the whole gradient's agreement, not a tensor's:
//! the [`AgreementPool`] of a requester adds up the rounds of all its
//! tensors over a window of steps. Per tensor the signal does not tell
//! the models apart (the conv net's largest, dense layer agrees at
//! 0.07–0.36 over a run, the noisy MLP's largest at 0.14–0.19); the whole
//! gradient does, because the conv net's convolutions agree most.
//!
//! The pushes are decoded ones: 3LC's quantization makes them agree less
//! than the true gradients, so the threshold the holder compares with is
//! set for decoded pushes.

use crate::table::ContextMemory;

/// Holders a round tracks; pushes from more are left out of it.
const MAX_HOLDERS: usize = 256;
/// Tensors a pool tells apart in one window (more count as these).
const MAX_TENSORS: usize = 4096;

/// What one closed round measured: `2 Σ_{i<j} g_i·g_j / (n − 1)` and
/// `Σ ‖g_i‖²`, whose ratio is the round's agreement. Rounds of several
/// tensors add up into the whole gradient's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    /// The pairwise products, scaled by the number of holders.
    pub cross: f64,
    /// The pushes' squared norms.
    pub squares: f64,
}

/// One tensor's rounds on the requester's side.
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
}

impl AgreementMeter {
    /// Counts the push of `values` by the holder `holder` (a hash of its
    /// name); returns the round it closed, if one of two holders or more
    /// that can be measured. A push of another length than the round's
    /// starts a new round.
    pub fn observe(&mut self, holder: u64, values: &[f32]) -> Option<Round> {
        if self.holders.contains(&holder) || values.len() != self.sum.len() {
            let closed = self.close_round();
            self.sum.clear();
            self.sum.extend_from_slice(values);
            self.holders.clear();
            self.holders.push(holder);
            self.cross = 0.0;
            self.squares = sum_of_squares(values);
            return closed;
        }
        if self.holders.len() < MAX_HOLDERS {
            let (dot, squares) = add_measuring(&mut self.sum, values);
            self.cross += dot;
            self.squares += squares;
            self.holders.push(holder);
        }
        None
    }

    fn close_round(&self) -> Option<Round> {
        let n = self.holders.len();
        if n < 2 || self.squares <= 0.0 || !self.cross.is_finite() || !self.squares.is_finite() {
            return None;
        }
        Some(Round {
            cross: 2.0 * self.cross / (n - 1) as f64,
            squares: self.squares,
        })
    }
}

impl ContextMemory for AgreementMeter {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<AgreementMeter>()
            + 4 * self.sum.capacity()
            + 8 * self.holders.capacity()
    }
}

/// One requester's agreement over the whole gradient it collects: the
/// rounds of all its tensors, added up over a window of steps. Per tensor
/// the signal does not separate the models (a conv net's dense layer
/// agrees as little as a noisy MLP's), the whole gradient does.
#[derive(Debug, Clone, Default)]
pub struct AgreementPool {
    /// `Σ cross` over the window's rounds.
    cross: f64,
    /// `Σ squares` over the window's rounds.
    squares: f64,
    /// Rounds in the window.
    rounds: u32,
    /// The tensors that closed a round in the window, by a hash of name.
    tensors: Vec<u64>,
    /// The last complete window's agreement.
    last: Option<f64>,
}

impl AgreementPool {
    /// Adds `round` of the tensor `tensor` (a hash of its name). A window
    /// ends after `window` rounds of each tensor seen in it (`window`
    /// steps), and its agreement becomes the one reported.
    pub fn add(&mut self, tensor: u64, round: Round, window: u32) {
        if !self.tensors.contains(&tensor) && self.tensors.len() < MAX_TENSORS {
            self.tensors.push(tensor);
        }
        self.cross += round.cross;
        self.squares += round.squares;
        self.rounds = self.rounds.saturating_add(1);
        let due = u64::from(window.max(1)) * self.tensors.len() as u64;
        if u64::from(self.rounds) >= due {
            if self.squares > 0.0 && self.cross.is_finite() && self.squares.is_finite() {
                self.last = Some((self.cross / self.squares).clamp(-1.0, 1.0));
            }
            self.cross = 0.0;
            self.squares = 0.0;
            self.rounds = 0;
            self.tensors.clear();
        }
    }

    /// The agreement of the last complete window; `None` before one.
    pub fn agreement(&self) -> Option<f64> {
        self.last
    }
}

impl ContextMemory for AgreementPool {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<AgreementPool>() + 8 * self.tensors.capacity()
    }
}

/// Lanes of the inner loop: the compiler keeps them in one vector register.
const LANES: usize = 8;
/// Values summed in f32 lanes before the lanes go into f64: short enough
/// that a lane's rounding stays far below what the agreement resolves.
const BLOCK: usize = 1024;

/// Adds `values` into `sum`, returning `Σ sum·v` (before the add) and
/// `Σ v²`. The pushes meet here once per step on the parameter task's
/// sidecar, so this runs at memory speed: f32 lanes per block, f64 across.
fn add_measuring(sum: &mut [f32], values: &[f32]) -> (f64, f64) {
    let (mut dot, mut squares) = (0.0f64, 0.0f64);
    for (sum, values) in sum.chunks_mut(BLOCK).zip(values.chunks(BLOCK)) {
        let mut dot_lanes = [0.0f32; LANES];
        let mut square_lanes = [0.0f32; LANES];
        let mut sums = sum.chunks_exact_mut(LANES);
        let mut vals = values.chunks_exact(LANES);
        for (s, v) in (&mut sums).zip(&mut vals) {
            for i in 0..LANES {
                dot_lanes[i] += s[i] * v[i];
                square_lanes[i] += v[i] * v[i];
                s[i] += v[i];
            }
        }
        for (s, &v) in sums.into_remainder().iter_mut().zip(vals.remainder()) {
            dot_lanes[0] += *s * v;
            square_lanes[0] += v * v;
            *s += v;
        }
        dot += dot_lanes.iter().map(|&x| f64::from(x)).sum::<f64>();
        squares += square_lanes.iter().map(|&x| f64::from(x)).sum::<f64>();
    }
    (dot, squares)
}

/// `Σ v²`, in f32 lanes per block as [`add_measuring`].
fn sum_of_squares(values: &[f32]) -> f64 {
    let mut squares = 0.0f64;
    for block in values.chunks(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        let mut chunks = block.chunks_exact(LANES);
        for v in &mut chunks {
            for i in 0..LANES {
                lanes[i] += v[i] * v[i];
            }
        }
        for &v in chunks.remainder() {
            lanes[0] += v * v;
        }
        squares += lanes.iter().map(|&x| f64::from(x)).sum::<f64>();
    }
    squares
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;

    /// The agreement of one round of two holders' pushes.
    fn once(a: &[f32], b: &[f32]) -> Option<f64> {
        let mut m = AgreementMeter::default();
        assert_eq!(m.observe(A, a), None);
        assert_eq!(m.observe(B, b), None);
        m.observe(A, a).map(|r| r.cross / r.squares)
    }

    #[test]
    fn a_round_closes_when_a_holder_pushes_again() {
        let mut m = AgreementMeter::default();
        assert_eq!(m.observe(A, &[1.0, 0.0]), None);
        assert_eq!(m.observe(B, &[1.0, 0.0]), None);
        let round = m.observe(A, &[1.0, 0.0]).unwrap();
        assert_eq!(round.cross / round.squares, 1.0);
        // A holder alone never makes a round of two.
        let mut alone = AgreementMeter::default();
        for _ in 0..5 {
            assert_eq!(alone.observe(A, &[1.0, 2.0]), None);
        }
    }

    #[test]
    fn equal_norms_give_the_cosine() {
        let got = once(&[1.0, 0.0], &[0.5, 0.75f32.sqrt()]).unwrap();
        assert!((got - 0.5).abs() < 1e-6, "{got}");
        assert_eq!(once(&[1.0, 0.0], &[-1.0, 0.0]), Some(-1.0));
        assert_eq!(once(&[1.0, 0.0], &[0.0, 3.0]), Some(0.0));
    }

    #[test]
    fn three_holders_pair_every_two() {
        // (a, b) at cosine 1, (a, c) and (b, c) at 0.
        let mut m = AgreementMeter::default();
        m.observe(1, &[1.0, 0.0]);
        m.observe(2, &[1.0, 0.0]);
        m.observe(3, &[0.0, 1.0]);
        let round = m.observe(1, &[1.0, 0.0]).unwrap();
        // 2 * 1 / (2 * 3) = 1/3: the mean of the three pairs' cosines.
        assert!((round.cross / round.squares - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn rounds_that_cannot_be_measured_are_left_out() {
        let mut m = AgreementMeter::default();
        // Zero gradients, a non-finite one, a change of length.
        for (holder, values) in [
            (A, &[0.0f32, 0.0][..]),
            (B, &[0.0, 0.0]),
            (A, &[f32::NAN, 1.0]),
            (B, &[1.0, 0.0]),
            (A, &[1.0, 0.0, 1.0]),
            (B, &[1.0, 0.0]),
            (A, &[1.0, 0.0, 1.0]),
        ] {
            assert_eq!(m.observe(holder, values), None);
        }
    }

    #[test]
    fn a_pool_weighs_tensors_by_their_norms_over_a_window_of_steps() {
        let mut pool = AgreementPool::default();
        let agree = Round {
            cross: 1.0,
            squares: 1.0,
        };
        let apart = Round {
            cross: 0.0,
            squares: 3.0,
        };
        // Two tensors, windows of 2 steps: 4 rounds.
        for _ in 0..3 {
            pool.add(10, agree, 2);
            pool.add(20, apart, 2);
        }
        assert_eq!(pool.agreement(), Some(0.25), "(1 + 1) / (1 + 3 + 1 + 3)");
        for _ in 0..4 {
            pool.add(10, apart, 2);
            pool.add(20, apart, 2);
        }
        assert_eq!(pool.agreement(), Some(0.0));
        assert_eq!(AgreementPool::default().agreement(), None);
    }

    #[test]
    fn the_blocked_sums_match_plain_ones() {
        // Lengths off the lanes and blocks, values of mixed sign and scale.
        for n in [0usize, 1, 7, 8, 9, 1023, 1024, 1025, 5000] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) * 1e-2)
                .collect();
            let mut sum = a.clone();
            let (dot, squares) = add_measuring(&mut sum, &b);
            let plain_dot: f64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| f64::from(x) * f64::from(y))
                .sum();
            let plain_squares: f64 = b.iter().map(|&y| f64::from(y) * f64::from(y)).sum();
            assert!(
                (dot - plain_dot).abs() <= 1e-5 * plain_dot.abs().max(1e-9),
                "{n}"
            );
            assert!(
                (squares - plain_squares).abs() <= 1e-5 * plain_squares.max(1e-9),
                "{n}"
            );
            assert!(sum
                .iter()
                .zip(a.iter().zip(&b))
                .all(|(&s, (&x, &y))| s == x + y));
        }
    }

    #[test]
    fn memory_is_one_tensor_whatever_the_holders() {
        let mut m = AgreementMeter::default();
        for holder in 0..1000u64 {
            m.observe(holder, &[1.0; 1024]);
        }
        assert!(
            m.memory_bytes() < 4096 + 8 * 512 + 256,
            "{}",
            m.memory_bytes()
        );
    }
}
