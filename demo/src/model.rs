//! The model the emulated job trains: a multilayer perceptron (ReLU hidden
//! layers, softmax cross-entropy) and SGD with momentum, in plain Rust.
//!
//! Parameters are a list of tensors in TensorFlow's order and layout
//! (Keras `Dense` layers named `dense`, `dense_1`, …; each a kernel of shape
//! `[inputs, outputs]`, row-major, then a bias of shape `[outputs]`), so
//! what crosses the wire has the names and shapes a real job's would.
//! Initial weights are deterministic for a seed.

use super::data::{Examples, Rng};

/// Loss and accuracy on a set of examples.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evaluation {
    /// Mean softmax cross-entropy.
    pub loss: f64,
    /// Share of examples classified correctly, 0 to 1.
    pub accuracy: f64,
}

/// The shape of the network: layer widths from input to output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mlp {
    /// Widths, input first, classes last (at least two entries).
    pub sizes: Vec<usize>,
}

impl Mlp {
    /// A network with these layer widths.
    pub fn new(sizes: Vec<usize>) -> Mlp {
        Mlp { sizes }
    }

    /// Number of dense layers.
    pub fn layers(&self) -> usize {
        self.sizes.len().saturating_sub(1)
    }

    /// The Keras name of dense layer `layer`: `dense`, `dense_1`, ….
    pub fn layer_name(layer: usize) -> String {
        if layer == 0 {
            "dense".to_owned()
        } else {
            format!("dense_{layer}")
        }
    }

    /// Shapes of the parameter tensors: kernel `[in, out]`, then bias `[out]`, per layer.
    pub fn shapes(&self) -> Vec<Vec<u64>> {
        self.sizes
            .windows(2)
            .flat_map(|w| [vec![w[0] as u64, w[1] as u64], vec![w[1] as u64]])
            .collect()
    }

    /// Total number of parameters.
    pub fn parameter_count(&self) -> usize {
        self.shapes()
            .iter()
            .map(|s| s.iter().product::<u64>() as usize)
            .sum()
    }

    /// Initial parameters: Glorot-uniform kernels (Keras' default), zero biases.
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = Rng::new(seed, 2);
        let mut params = Vec::new();
        for w in self.sizes.windows(2) {
            let limit = (6.0 / (w[0] + w[1]) as f32).sqrt();
            params.push(
                (0..w[0] * w[1])
                    .map(|_| (rng.uniform() * 2.0 - 1.0) * limit)
                    .collect(),
            );
            params.push(vec![0.0; w[1]]);
        }
        params
    }

    /// Activations of every layer for `rows` examples `x`: `acts[0]` is the
    /// input, `acts[l + 1]` the output of layer `l` (ReLU except the last,
    /// which holds the logits).
    fn forward(&self, params: &[Vec<f32>], x: &[f32], rows: usize) -> Vec<Vec<f32>> {
        let mut acts = vec![x.to_vec()];
        for l in 0..self.layers() {
            let (inputs, outputs) = (self.sizes[l], self.sizes[l + 1]);
            let mut z = Vec::with_capacity(rows * outputs);
            for _ in 0..rows {
                z.extend_from_slice(&params[2 * l + 1]);
            }
            matmul_add(&acts[l], inputs, &params[2 * l], outputs, &mut z);
            if l + 1 < self.layers() {
                z.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            acts.push(z);
        }
        acts
    }

    /// Mean loss and its gradient with respect to every parameter, on the
    /// examples `batch` of `set`.
    pub fn gradients(
        &self,
        params: &[Vec<f32>],
        set: &Examples,
        batch: &[usize],
    ) -> (f64, Vec<Vec<f32>>) {
        let features = self.sizes[0];
        let rows = batch.len();
        let mut x = Vec::with_capacity(rows * features);
        for &i in batch {
            x.extend_from_slice(&set.x[i * features..(i + 1) * features]);
        }
        let acts = self.forward(params, &x, rows);
        let classes = self.sizes[self.layers()];
        let mut dz = acts[self.layers()].clone();
        let mut loss = 0.0;
        for (r, &i) in batch.iter().enumerate() {
            let row = &mut dz[r * classes..(r + 1) * classes];
            loss += softmax_in_place(row, set.y[i] as usize);
            row[set.y[i] as usize] -= 1.0;
            row.iter_mut().for_each(|v| *v /= rows as f32);
        }
        let mut grads: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.len()]).collect();
        for l in (0..self.layers()).rev() {
            let (inputs, outputs) = (self.sizes[l], self.sizes[l + 1]);
            matmul_at_b(&acts[l], inputs, &dz, outputs, &mut grads[2 * l]);
            for row in dz.chunks_exact(outputs) {
                add_to(&mut grads[2 * l + 1], row);
            }
            if l > 0 {
                let mut da = vec![0.0; rows * inputs];
                matmul_b_wt(&dz, outputs, &params[2 * l], inputs, &mut da);
                for (d, a) in da.iter_mut().zip(&acts[l]) {
                    if *a <= 0.0 {
                        *d = 0.0;
                    }
                }
                dz = da;
            }
        }
        (loss / rows.max(1) as f64, grads)
    }

    /// Mean loss and accuracy on every example of `set`.
    pub fn evaluate(&self, params: &[Vec<f32>], set: &Examples) -> Evaluation {
        let features = self.sizes[0];
        let classes = self.sizes[self.layers()];
        let (mut loss, mut correct) = (0.0, 0usize);
        let chunk = 256;
        for start in (0..set.len()).step_by(chunk) {
            let rows = chunk.min(set.len() - start);
            let x = &set.x[start * features..(start + rows) * features];
            let mut logits = self.forward(params, x, rows).pop().unwrap_or_default();
            for (r, row) in logits.chunks_exact_mut(classes).enumerate() {
                let label = set.y[start + r] as usize;
                let predicted = argmax(row);
                loss += softmax_in_place(row, label);
                correct += usize::from(predicted == label);
            }
        }
        let n = set.len().max(1) as f64;
        Evaluation {
            loss: loss / n,
            accuracy: correct as f64 / n,
        }
    }
}

/// SGD with momentum, as TensorFlow's `MomentumOptimizer` applies it:
/// `v = momentum * v + g; w -= lr * v`.
#[derive(Debug, Clone)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f32,
    /// Momentum (0 for plain SGD).
    pub momentum: f32,
    velocity: Vec<Vec<f32>>,
}

impl Sgd {
    /// An optimizer for parameters of the given sizes.
    pub fn new(lr: f32, momentum: f32, params: &[Vec<f32>]) -> Sgd {
        Sgd {
            lr,
            momentum,
            velocity: params.iter().map(|p| vec![0.0; p.len()]).collect(),
        }
    }

    /// Applies one step of `grads` to `params`.
    pub fn apply(&mut self, params: &mut [Vec<f32>], grads: &[Vec<f32>]) {
        for ((p, g), v) in params.iter_mut().zip(grads).zip(&mut self.velocity) {
            for ((w, g), v) in p.iter_mut().zip(g).zip(v.iter_mut()) {
                *v = self.momentum * *v + g;
                *w -= self.lr * *v;
            }
        }
    }
}

/// Turns logits into probabilities in place; returns `-ln p[label]`.
fn softmax_in_place(row: &mut [f32], label: usize) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
    -f64::from(row[label].max(f32::MIN_POSITIVE)).ln()
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

fn add_to(acc: &mut [f32], row: &[f32]) {
    acc.iter_mut().zip(row).for_each(|(a, v)| *a += v);
}

/// `out[r, :] += sum_k a[r, k] * w[k, :]` for `a` of `inner` columns and
/// `w` of `cols` columns (row by row, so the inner loop is a vectorisable
/// `axpy`, and zeros after a ReLU are skipped).
fn matmul_add(a: &[f32], inner: usize, w: &[f32], cols: usize, out: &mut [f32]) {
    for (a_row, out_row) in a.chunks_exact(inner).zip(out.chunks_exact_mut(cols)) {
        for (&s, w_row) in a_row.iter().zip(w.chunks_exact(cols)) {
            if s != 0.0 {
                out_row.iter_mut().zip(w_row).for_each(|(o, w)| *o += s * w);
            }
        }
    }
}

/// `out[k, :] += sum_r a[r, k] * d[r, :]`: a kernel's gradient from the
/// layer's input `a` (`inner` columns) and output gradient `d` (`cols` columns).
fn matmul_at_b(a: &[f32], inner: usize, d: &[f32], cols: usize, out: &mut [f32]) {
    for (a_row, d_row) in a.chunks_exact(inner).zip(d.chunks_exact(cols)) {
        for (&s, out_row) in a_row.iter().zip(out.chunks_exact_mut(cols)) {
            if s != 0.0 {
                out_row.iter_mut().zip(d_row).for_each(|(o, d)| *o += s * d);
            }
        }
    }
}

/// `out[r, k] = dot(d[r, :], w[k, :])`: the gradient with respect to a
/// layer's input, for `d` and `w` of `cols` columns and `out` of `inner`.
fn matmul_b_wt(d: &[f32], cols: usize, w: &[f32], inner: usize, out: &mut [f32]) {
    for (d_row, out_row) in d.chunks_exact(cols).zip(out.chunks_exact_mut(inner)) {
        for (o, w_row) in out_row.iter_mut().zip(w.chunks_exact(cols)) {
            *o = dot(d_row, w_row);
        }
    }
}

/// A dot product in eight independent lanes, which the compiler vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::super::data::{Batches, DataSpec, Dataset};
    use super::*;

    #[test]
    fn gradients_match_finite_differences() {
        let mlp = Mlp::new(vec![5, 7, 4, 3]);
        let data = Dataset::generate(
            &DataSpec {
                features: 5,
                classes: 3,
                clusters_per_class: 1,
                noise: 0.5,
                train: 16,
                test: 4,
            },
            3,
        );
        let params = mlp.init(9);
        let batch: Vec<usize> = (0..16).collect();
        let (_, grads) = mlp.gradients(&params, &data.train, &batch);
        let loss_at = |p: &[Vec<f32>]| mlp.gradients(p, &data.train, &batch).0;
        for (t, i) in [(0, 3), (1, 2), (2, 5), (4, 7), (5, 1)] {
            let h = 1e-2;
            let mut plus = params.clone();
            plus[t][i] += h;
            let mut minus = params.clone();
            minus[t][i] -= h;
            let numeric = (loss_at(&plus) - loss_at(&minus)) / (2.0 * f64::from(h));
            let analytic = f64::from(grads[t][i]);
            assert!(
                (numeric - analytic).abs() < 2e-3 + 0.05 * analytic.abs(),
                "tensor {t} value {i}: numeric {numeric} analytic {analytic}"
            );
        }
    }

    #[test]
    fn shapes_and_names_follow_keras() {
        let mlp = Mlp::new(vec![64, 1024, 512, 10]);
        assert_eq!(mlp.parameter_count(), 596_490);
        assert_eq!(mlp.shapes()[2], vec![1024, 512]);
        assert_eq!(Mlp::layer_name(0), "dense");
        assert_eq!(Mlp::layer_name(2), "dense_2");
    }

    #[test]
    fn training_lowers_the_loss() {
        let mlp = Mlp::new(vec![8, 16, 4]);
        let spec = DataSpec {
            features: 8,
            classes: 4,
            clusters_per_class: 1,
            noise: 0.5,
            train: 256,
            test: 128,
        };
        let data = Dataset::generate(&spec, 1);
        let mut params = mlp.init(1);
        let before = mlp.evaluate(&params, &data.test);
        let mut sgd = Sgd::new(0.1, 0.9, &params);
        let mut batches = Batches::new(data.train.len(), 1, 0);
        for _ in 0..50 {
            let (_, g) = mlp.gradients(&params, &data.train, &batches.next_batch(32));
            sgd.apply(&mut params, &g);
        }
        let after = mlp.evaluate(&params, &data.test);
        assert!(after.loss < before.loss / 2.0, "{before:?} -> {after:?}");
        assert!(after.accuracy > 0.9, "{after:?}");
    }
}
