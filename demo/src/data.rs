//! The data the emulated job learns: a generated classification problem
//! (a mixture of Gaussian clusters, 10 classes of 64 features by default)
//! with a held-out test split, sharded between workers and cut into
//! shuffled mini-batches — all deterministic for a seed, so two runs of the
//! demo see exactly the same examples in the same order.

/// A small deterministic random number generator (SplitMix64): enough for
/// initial weights and generated data, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, mixed with `stream` so that independent uses
    /// (data, weights, each worker's batches) do not share a sequence.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xA24B_AED4_963E_E407));
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // in (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }
}

/// How to generate the data set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DataSpec {
    /// Values per example.
    pub features: usize,
    /// Number of classes.
    pub classes: usize,
    /// Gaussian clusters per class (more than one makes the classes not
    /// linearly separable).
    pub clusters_per_class: usize,
    /// Standard deviation of each cluster around its centre (the centres
    /// have unit variance per feature).
    pub noise: f32,
    /// Training examples.
    pub train: usize,
    /// Held-out test examples.
    pub test: usize,
}

impl Default for DataSpec {
    /// 10 classes of 64 features, two clusters each; 8192 training and 2000
    /// test examples.
    fn default() -> Self {
        DataSpec {
            features: 64,
            classes: 10,
            clusters_per_class: 2,
            noise: 1.5,
            train: 8192,
            test: 2000,
        }
    }
}

/// Examples and their labels, row-major.
#[derive(Debug, Clone, Default)]
pub struct Examples {
    /// `len() * features` values.
    pub x: Vec<f32>,
    /// One class per example.
    pub y: Vec<u8>,
}

impl Examples {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// A generated classification problem: a mixture of Gaussian clusters,
/// split into a training and a test set.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Values per example.
    pub features: usize,
    /// Number of classes.
    pub classes: usize,
    /// The training set (sharded between workers).
    pub train: Examples,
    /// The test set (evaluated by the parameter task and worker 0).
    pub test: Examples,
}

impl Dataset {
    /// Generates the data set of `spec` for `seed`.
    pub fn generate(spec: &DataSpec, seed: u64) -> Dataset {
        let mut rng = Rng::new(seed, 1);
        let centres: Vec<Vec<f32>> = (0..spec.classes * spec.clusters_per_class)
            .map(|_| (0..spec.features).map(|_| rng.normal()).collect())
            .collect();
        // Unit variance per feature overall, as a standardised input would be.
        let scale = 1.0 / (1.0 + spec.noise * spec.noise).sqrt();
        let mut sample = |n: usize| {
            let mut set = Examples {
                x: Vec::with_capacity(n * spec.features),
                y: Vec::with_capacity(n),
            };
            for i in 0..n {
                let class = i % spec.classes;
                let cluster = class * spec.clusters_per_class + rng.below(spec.clusters_per_class);
                for &c in &centres[cluster] {
                    set.x.push((c + spec.noise * rng.normal()) * scale);
                }
                set.y.push(class as u8);
            }
            set
        };
        let train = sample(spec.train);
        let test = sample(spec.test);
        Dataset {
            features: spec.features,
            classes: spec.classes,
            train,
            test,
        }
    }

    /// The training examples of worker `index` of `workers` (every
    /// `workers`-th example: disjoint shards, as data-parallel training has).
    pub fn shard(&self, index: usize, workers: usize) -> Examples {
        let mut shard = Examples::default();
        for i in (index..self.train.len()).step_by(workers.max(1)) {
            shard
                .x
                .extend_from_slice(&self.train.x[i * self.features..(i + 1) * self.features]);
            shard.y.push(self.train.y[i]);
        }
        shard
    }
}

/// Mini-batches over one worker's shard: shuffled epochs, deterministic.
#[derive(Debug, Clone)]
pub struct Batches {
    order: Vec<usize>,
    next: usize,
    rng: Rng,
}

impl Batches {
    /// Batches over `len` examples, shuffled with `seed` and `stream`.
    pub fn new(len: usize, seed: u64, stream: u64) -> Batches {
        Batches {
            order: (0..len).collect(),
            next: len,
            rng: Rng::new(seed, stream),
        }
    }

    /// Indices of the next `size` examples.
    pub fn next_batch(&mut self, size: usize) -> Vec<usize> {
        let mut batch = Vec::with_capacity(size);
        while batch.len() < size && !self.order.is_empty() {
            if self.next == self.order.len() {
                for i in (1..self.order.len()).rev() {
                    let j = self.rng.below(i + 1);
                    self.order.swap(i, j);
                }
                self.next = 0;
            }
            batch.push(self.order[self.next]);
            self.next += 1;
        }
        batch
    }
}
