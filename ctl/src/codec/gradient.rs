//! Deterministic gradient-like test data for the benchmark.
//!
//! Real gradients are centred on zero, heavy-tailed, differ in scale from
//! one layer to the next, have some exact zeros (dead units), and change
//! from one training step to the next while keeping part of their shape.
//! The generator imitates that with no dependency: a splitmix64 stream,
//! Laplace values times a log-normal factor, a log-normal scale per block
//! of values ("layer"), and a persistent component shared by all steps.

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

    /// Standard Laplace (scale 1): an exponential with a random sign.
    pub fn laplace(&mut self) -> f64 {
        let bits = self.next_u64();
        let u = ((bits >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let e = -u.ln();
        if bits & 1 == 0 {
            e
        } else {
            -e
        }
    }
}

/// The seed the benchmark's data comes from.
pub const SEED: u64 = 0x031c_5eed;
/// Typical magnitude of a value.
const MAGNITUDE: f64 = 1e-3;
/// Values per block sharing one scale.
const BLOCK: usize = 4096;
/// Share of values that are exactly zero.
const ZEROS: f64 = 0.05;

/// Draws a heavy-tailed value with typical magnitude 1.
fn heavy(rng: &mut SplitMix64) -> f64 {
    rng.laplace() * (0.5 * rng.normal()).exp()
}

/// `steps` tensors of `n` values, as successive gradients of one variable:
/// same block scales and persistent component, fresh noise at each step.
pub fn gradient_steps(n: usize, steps: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut shape = SplitMix64::new(seed);
    let scales: Vec<f64> = (0..n.div_ceil(BLOCK))
        .map(|_| MAGNITUDE * (0.75 * shape.normal()).exp())
        .collect();
    let persistent: Vec<f64> = (0..n).map(|_| 0.5 * heavy(&mut shape)).collect();
    let dead: Vec<bool> = (0..n).map(|_| shape.open01() < ZEROS).collect();
    (0..steps)
        .map(|step| {
            let mut rng =
                SplitMix64::new(seed ^ (step as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
            (0..n)
                .map(|i| {
                    if dead[i] {
                        0.0
                    } else {
                        (scales[i / BLOCK] * (persistent[i] + heavy(&mut rng))) as f32
                    }
                })
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
        assert!(zeros > 1000 && zeros < 4000, "zeros {zeros}");
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
