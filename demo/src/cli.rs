//! The `tlc-demo` command: its flags, and a run that prints progress on
//! stderr and the result (a table, or one JSON object) on stdout.

use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::options::{Compression, DemoOptions};
use crate::report::DemoReport;
use crate::run::run_job;
use tlc_sidecar::policy::{Policy, PolicySettings};

/// Trains an emulated TensorFlow parameter-server job twice through tlc
/// sidecars over rate-limited links — uncompressed, then with 3LC — and
/// compares traffic, step time and accuracy.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Each pod's link rate in Mbit/s, each way; 0 for unlimited [default: 10].
    #[arg(long, value_name = "MBIT")]
    pub rate_mbit: Option<f64>,
    /// Latency added between pods, each way, in milliseconds [default: 0].
    #[arg(long, value_name = "MS")]
    pub latency_ms: Option<f64>,
    /// Synchronous training steps [default: 20].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Worker tasks [default: 2].
    #[arg(long)]
    pub workers: Option<usize>,
    /// 3LC sparsity multiplier s, 1 <= s < 2 [default: 1.0].
    #[arg(long)]
    pub sparsity: Option<f32>,
    /// Width of the first hidden layer; the second is half [default: 768, 349,066
    /// parameters; 1024 is deploy/tf/train.py's 596,490].
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Examples per worker and step [default: 64].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Learning rate (SGD with momentum 0.9) [default: 0.1].
    #[arg(long)]
    pub lr: Option<f32>,
    /// Seed of data, weights and batches [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Tensors below this many bytes pass uncompressed [default: the policy's `min_bytes`, 1024; vectors from 4096].
    #[arg(long, value_name = "BYTES")]
    pub min_bytes: Option<u64>,
    /// The compressed run's sidecars take this file's `[policy]` table (as in
    /// tlcd's config file; tlcd's defaults for keys it leaves out) instead of
    /// 3LC at --sparsity.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sparsity", "min_bytes"])]
    pub policy: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl DemoArgs {
    /// The options these flags select, over the defaults.
    pub fn options(&self) -> Result<DemoOptions> {
        let d = DemoOptions::default();
        let rate = self.rate_mbit.or(d.rate_mbit).unwrap_or(0.0);
        ensure!(
            rate.is_finite() && rate >= 0.0,
            "--rate-mbit {rate}: give a rate in Mbit/s, or 0 for unlimited"
        );
        let latency = self.latency_ms.unwrap_or(0.0);
        ensure!(
            latency.is_finite() && (0.0..=10_000.0).contains(&latency),
            "--latency-ms {latency}: give 0 to 10000 milliseconds"
        );
        let options = DemoOptions {
            workers: self.workers.unwrap_or(d.workers),
            steps: self.steps.unwrap_or(d.steps),
            rate_mbit: (rate > 0.0).then_some(rate),
            latency: Duration::from_secs_f64(latency / 1e3),
            sparsity: self.sparsity.unwrap_or(d.sparsity),
            hidden: self.hidden.unwrap_or(d.hidden),
            batch: self.batch.unwrap_or(d.batch),
            lr: self.lr.unwrap_or(d.lr),
            seed: self.seed.unwrap_or(d.seed),
            min_bytes: self.min_bytes.unwrap_or(d.min_bytes),
            policy: self.policy.as_deref().map(read_policy).transpose()?,
            ..d
        };
        ensure!(
            (1..=64).contains(&options.workers),
            "--workers {}: give 1 to 64",
            options.workers
        );
        ensure!(options.steps >= 1, "--steps: give at least 1");
        ensure!(options.hidden >= 2, "--hidden: give at least 2");
        ensure!(options.batch >= 1, "--batch: give at least 1");
        ensure!(
            options.lr.is_finite() && options.lr > 0.0,
            "--lr {}: give a positive learning rate",
            options.lr
        );
        tlc_codec::Sparsity::new(options.sparsity)
            .with_context(|| format!("--sparsity {}", options.sparsity))?;
        Ok(options)
    }
}

/// The `[policy]` table of a TOML file, checked as tlcd checks it.
fn read_policy(path: &std::path::Path) -> Result<PolicySettings> {
    /// The file: a `[policy]` table, and nothing else.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        policy: PolicySettings,
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--policy {}: cannot read it", path.display()))?;
    let file: File = toml::from_str(&text)
        .with_context(|| format!("--policy {}: reading its [policy] table", path.display()))?;
    Policy::new(&file.policy).with_context(|| format!("--policy {}", path.display()))?;
    Ok(file.policy)
}

/// Runs `tlc-demo` and prints its result.
pub fn run(args: &DemoArgs) -> Result<()> {
    let options = args.options()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let runs = [
            Compression::None,
            Compression::ThreeLc {
                sparsity: options.sparsity,
            },
        ];
        let mut reports = Vec::new();
        for (i, compression) in runs.into_iter().enumerate() {
            eprintln!(
                "tlc-demo: run {}/2, {}: {} steps, {} workers ...",
                i + 1,
                compression.label(),
                options.steps,
                options.workers
            );
            let report = run_job(&options, compression)
                .await
                .with_context(|| format!("the {} run failed", compression.label()))?;
            eprintln!(
                "tlc-demo: {:.3} s per step, worker 0 test accuracy {:.2}%",
                report.mean_step_seconds(),
                100.0 * report.chief_eval.accuracy
            );
            reports.push(report);
        }
        let tlc = reports.pop().context("no 3LC run")?;
        let baseline = reports.pop().context("no baseline run")?;
        anyhow::Ok(DemoReport {
            options: options.clone(),
            baseline,
            tlc,
        })
    })?;
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        demo: DemoArgs,
    }

    fn options(args: &[&str]) -> Result<DemoOptions> {
        let cli = Cli::try_parse_from(std::iter::once("tlc-demo").chain(args.iter().copied()))?;
        cli.demo.options()
    }

    #[test]
    fn a_policy_file_is_the_compressed_runs_whole_policy() {
        let dir = std::env::temp_dir().join(format!("tlc-demo-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "[policy]\nwarmup_steps = 5\n").unwrap();
        let o = options(&["--policy", good.to_str().unwrap()]).unwrap();
        let compressed = o.policy_for(Compression::ThreeLc { sparsity: 1.0 });
        assert_eq!(compressed.warmup_steps, 5);
        assert_eq!(compressed.push.codec, "3lc", "tlcd's defaults for the rest");
        assert_eq!(o.policy_for(Compression::None).push.codec, "none");
        assert_eq!(
            o.label_for(Compression::ThreeLc { sparsity: 1.0 }),
            "--policy"
        );

        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[policy.push]\ncodec = \"3lc\"\nsparsity = 2.5\n").unwrap();
        let err = options(&["--policy", bad.to_str().unwrap()]).unwrap_err();
        assert!(
            format!("{err:#}").contains("policy.push.sparsity = 2.5"),
            "{err:#}"
        );
        let err = options(&["--policy", good.to_str().unwrap(), "--sparsity", "1.5"]);
        assert!(err.is_err(), "--policy replaces --sparsity");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
