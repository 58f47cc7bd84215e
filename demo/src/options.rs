//! What a demo run is made of: the job's size, model, data and links
//! ([`DemoOptions`]), and what the sidecars do to its tensors
//! ([`Compression`]).

use std::time::Duration;

use tlc_sidecar::policy::{CodecSettings, PolicySettings};

use crate::data::DataSpec;
use crate::model::Mlp;

/// Everything a demo run is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOptions {
    /// Worker tasks.
    pub workers: usize,
    /// Synchronous training steps.
    pub steps: usize,
    /// Each pod's link rate each way, in Mbit/s (`None`: unlimited).
    pub rate_mbit: Option<f64>,
    /// Latency added each way between pods.
    pub latency: Duration,
    /// 3LC sparsity multiplier of the compressed run.
    pub sparsity: f32,
    /// Width of the first hidden layer; the second is half as wide.
    pub hidden: usize,
    /// Examples per worker and step.
    pub batch: usize,
    /// Learning rate.
    pub lr: f32,
    /// SGD momentum.
    pub momentum: f32,
    /// Seed of data, initial weights, batches and incarnations.
    pub seed: u64,
    /// The generated data set.
    pub data: DataSpec,
    /// Tensors smaller than this pass the sidecars uncompressed (the
    /// policy's `min_bytes`).
    pub min_bytes: u64,
    /// The compressed run's whole `[policy]` table (`--policy FILE`),
    /// instead of 3LC at `sparsity` from `min_bytes`.
    pub policy: Option<PolicySettings>,
}

impl Default for DemoOptions {
    /// Two workers; an MLP 64 → 768 → 384 → 10 (349,066 parameters, 1.4 MB
    /// of f32) trained for 20 steps with `deploy/tf/train.py`'s optimizer
    /// (SGD, learning rate 0.1, momentum 0.9, 64 examples per worker); links
    /// of 10 Mbit/s. That is about 90 s uncompressed: communication is
    /// almost all of each step. `hidden = 1024` is `train.py`'s own model
    /// (596,490 parameters), about 7.6 s per step uncompressed.
    fn default() -> Self {
        DemoOptions {
            workers: 2,
            steps: 20,
            rate_mbit: Some(10.0),
            latency: Duration::ZERO,
            sparsity: 1.0,
            hidden: 768,
            batch: 64,
            lr: 0.1,
            momentum: 0.9,
            seed: 0,
            data: DataSpec::default(),
            min_bytes: PolicySettings::default().min_bytes,
            policy: None,
        }
    }
}

impl DemoOptions {
    /// The sidecars' policy for a run of `compression`: the `--policy`
    /// table for the compressed run if there is one.
    pub fn policy_for(&self, compression: Compression) -> PolicySettings {
        match (&self.policy, compression) {
            (Some(policy), Compression::ThreeLc { .. }) => policy.clone(),
            _ => compression.policy(self.min_bytes),
        }
    }

    /// A short name for a run of `compression` in reports.
    pub fn label_for(&self, compression: Compression) -> String {
        match (&self.policy, compression) {
            (Some(_), Compression::ThreeLc { .. }) => "--policy".into(),
            _ => compression.label(),
        }
    }

    /// The network these options train.
    pub fn mlp(&self) -> Mlp {
        Mlp::new(vec![
            self.data.features,
            self.hidden,
            (self.hidden / 2).max(1),
            self.data.classes,
        ])
    }
}

/// What the sidecars do to tensors in one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Compression {
    /// Codec `none` both ways: the sidecars forward tensors as they are.
    None,
    /// 3LC both ways at this sparsity multiplier.
    ThreeLc {
        /// `1 <= s < 2`.
        sparsity: f32,
    },
}

impl Compression {
    /// The sidecars' policy for this run.
    pub fn policy(self, min_bytes: u64) -> PolicySettings {
        let codec = match self {
            Compression::None => CodecSettings {
                codec: "none".into(),
                sparsity: None,
                ..CodecSettings::default()
            },
            Compression::ThreeLc { sparsity } => CodecSettings {
                codec: "3lc".into(),
                sparsity: Some(sparsity),
                ..CodecSettings::default()
            },
        };
        // The baseline is the job as TensorFlow runs it: nothing on the
        // link is compressed, losslessly or not.
        let compressed = !matches!(self, Compression::None);
        PolicySettings {
            min_bytes,
            push: codec.clone(),
            pull: codec,
            hop_compression: compressed,
            entropy: compressed,
            ..PolicySettings::default()
        }
    }

    /// A short name for reports.
    pub fn label(self) -> String {
        match self {
            Compression::None => "baseline (none)".into(),
            Compression::ThreeLc { sparsity } => format!("3LC s={sparsity:.2}"),
        }
    }
}
