//! Deterministic gradient-like test data for the benchmark.
//!
//! The data is what it imitates: the weight gradient of a dense layer over a
//! mini-batch, `g = sum_b a_b^T d_b`, with ReLU activations `a` (a quarter
//! of the input units dead, so their rows are exact zeros) and output
//! errors `d` whose scale differs from column to column, plus a component
//! shared by all steps (the direction training keeps pushing in), at a
//! typical magnitude of 1e-3. Its statistics are close to those of real MLP
//! gradients (`scripts/mlp_gradients.py`): max/mean |g| about 30, kurtosis
//! about 15, a quarter zeros. A splitmix64 stream keeps it dependency-free
//! and reproducible.

use std::f64::consts::TAU;

/// splitmix64 (Steele, Lea and Flood, 2014): tiny, fast, good enough for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1): never 0, so its logarithm is finite.
    pub fn open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller, one of the pair).
    pub fn normal(&mut self) -> f64 {
        let r = (-2.0 * self.open01().ln()).sqrt();
        r * (TAU * self.open01()).cos()
    }
}

/// The seed the benchmark's data comes from.
pub const SEED: u64 = 0x031c_5eed;
/// Typical magnitude of a value.
const MAGNITUDE: f64 = 1e-3;
/// Output units of the imitated layer (columns of the gradient).
const COLUMNS: usize = 1024;
/// Mini-batch size.
const BATCH: usize = 16;
/// Share of input units that are dead (rows of exact zeros).
const DEAD: f64 = 0.25;
/// Weight of the component shared by all steps.
const PERSISTENT: f64 = 0.5;

/// The fixed shape of the imitated layer.
struct Layer {
    rows: usize,
    cols: usize,
    /// Per input unit: `None` if dead, else the bias of its activations.
    bias: Vec<Option<f64>>,
    /// Per output unit: the scale of its errors.
    col_scale: Vec<f64>,
}

impl Layer {
    fn new(n: usize, rng: &mut SplitMix64) -> Layer {
        let cols = COLUMNS.min(n.max(1));
        let rows = n.div_ceil(cols);
        Layer {
            rows,
            cols,
            bias: (0..rows)
                .map(|_| (rng.open01() >= DEAD).then(|| 0.5 * rng.normal()))
                .collect(),
            col_scale: (0..cols).map(|_| (0.5 * rng.normal()).exp()).collect(),
        }
    }

    /// One mini-batch gradient, `sum_b a_b^T d_b`, flattened row-major (f64).
    fn batch_gradient(&self, rng: &mut SplitMix64) -> Vec<f64> {
        let activations: Vec<f64> = (0..BATCH * self.rows)
            .map(|k| match self.bias[k % self.rows] {
                Some(bias) => (rng.normal() + bias).max(0.0),
                None => 0.0,
            })
            .collect();
        let errors: Vec<f64> = (0..BATCH * self.cols)
            .map(|k| rng.normal() * self.col_scale[k % self.cols] / BATCH as f64)
            .collect();
        let mut g = vec![0f64; self.rows * self.cols];
        for b in 0..BATCH {
            let d = &errors[b * self.cols..(b + 1) * self.cols];
            for (r, row) in g.chunks_exact_mut(self.cols).enumerate() {
                let a = activations[b * self.rows + r];
                if a != 0.0 {
                    row.iter_mut().zip(d).for_each(|(g, d)| *g += a * d);
                }
            }
        }
        g
    }
}

/// `steps` tensors of `n` values, as successive gradients of one layer:
/// same dead units, column scales and persistent component, a fresh
/// mini-batch at each step.
pub fn gradient_steps(n: usize, steps: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut shape = SplitMix64::new(seed);
    let layer = Layer::new(n, &mut shape);
    let persistent = layer.batch_gradient(&mut shape);
    (0..steps)
        .map(|step| {
            let mut rng =
                SplitMix64::new(seed ^ (step as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
            let fresh = layer.batch_gradient(&mut rng);
            // A unit-variance activation times errors of scale 1/BATCH summed
            // over BATCH samples has a typical size of about 0.25 / BATCH^0.5.
            let unit = MAGNITUDE * 4.0 * (BATCH as f64).sqrt();
            fresh
                .iter()
                .zip(&persistent)
                .take(n)
                .map(|(f, p)| (unit * (f + PERSISTENT * p)) as f32)
                .collect()
        })
        .collect()
}

/// `steps` tensors derived from `base`: the first is `base` itself, the
/// others scale each value by a fresh random factor in [0.5, 1.5), so
/// zeros stay zero and the shape of the data is kept.
pub fn perturbed_steps(base: &[f32], steps: usize, seed: u64) -> Vec<Vec<f32>> {
    (0..steps)
        .map(|step| {
            if step == 0 {
                return base.to_vec();
            }
            let mut rng = SplitMix64::new(seed.wrapping_add(step as u64));
            base.iter()
                .map(|&v| v * (0.5 + rng.open01()) as f32)
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_like() {
        let steps = gradient_steps(50_000, 2, SEED);
        assert_eq!(steps.len(), 2);
        assert_ne!(steps[0], steps[1]);
        assert_eq!(steps[0], gradient_steps(50_000, 2, SEED)[0]);
        let x = &steps[0];
        assert!(x.iter().all(|v| v.is_finite()));
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
        let mut mags: Vec<f32> = x.iter().map(|v| v.abs()).filter(|&v| v > 0.0).collect();
        mags.sort_by(f32::total_cmp);
        let median = mags[mags.len() / 2];
        let max = mags[mags.len() - 1];
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((1e-4..1e-2).contains(&median), "median {median}");
        assert!(
            max > 20.0 * median,
            "not heavy-tailed: max {max}, median {median}"
        );
        let zeros = x.iter().filter(|&&v| v == 0.0).count();
        assert!(zeros > 8000 && zeros < 17000, "zeros {zeros}");
    }

    #[test]
    fn perturbation_keeps_zeros() {
        let base = [0.0, 1.0, -2.0];
        let steps = perturbed_steps(&base, 3, 1);
        assert_eq!(steps[0], base);
        assert_eq!(steps[2][0], 0.0);
        assert!(steps[2][1] >= 0.5 && steps[2][1] < 1.5);
    }
}
