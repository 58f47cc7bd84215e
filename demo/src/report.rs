//! What a demo run did, and the two ways to show it: a table for people
//! and one JSON object for scripts.
//!
//! Bytes are counted in three places that should agree: the tasks count
//! the f32 values they received (`tensor_bytes`), the sidecars count what
//! they compressed and what they sent instead (their [`Stats`]), and the
//! links count every byte that crossed between pods. The links' count is
//! the sidecars' payload plus HTTP/2, gRPC and protobuf framing and the
//! requests; the table shows that difference.
//!
//! [`Stats`]: tlc_sidecar::sidecar::stats::Stats

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use super::model::Evaluation;
use crate::options::{Compression, DemoOptions};
use tlc_sidecar::sidecar::stats::ratio;

/// The sidecars' counters, added over every pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SidecarTotals {
    /// Tensors sent compressed.
    pub compressed: u64,
    /// Gradients compressed: their f32 bytes.
    pub push_raw: u64,
    /// … and the envelopes sent instead.
    pub push_wire: u64,
    /// Model values compressed: their f32 bytes.
    pub pull_raw: u64,
    /// … and the envelopes sent instead.
    pub pull_wire: u64,
    /// Envelopes turned back into tensors.
    pub restored: u64,
    /// Envelopes that could not be used.
    pub decode_failures: u64,
    /// Original responses fetched after a failure.
    pub fallbacks: u64,
    /// Responses passed through unchanged, by reason.
    pub passed: BTreeMap<String, u64>,
}

impl SidecarTotals {
    /// f32 bytes of every compressed tensor.
    pub fn raw(&self) -> u64 {
        self.push_raw + self.pull_raw
    }

    /// Envelope bytes sent for them.
    pub fn wire(&self) -> u64 {
        self.push_wire + self.pull_wire
    }
}

/// One run of the job.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// What the run is called in reports.
    pub label: String,
    /// What the sidecars did.
    pub compression: Compression,
    /// Parameters of the model.
    pub parameters: usize,
    /// Seconds of each step (parameter task's clock).
    pub step_seconds: Vec<f64>,
    /// Seconds from the start of training to the chief's evaluation.
    pub seconds: f64,
    /// Mean training loss over the workers, per step.
    pub train_loss: Vec<f64>,
    /// The initial model on the test set.
    pub initial: Evaluation,
    /// The final model as the parameter task holds it.
    pub ps_eval: Evaluation,
    /// The final model as the chief received it through the sidecars.
    pub chief_eval: Evaluation,
    /// f32 bytes the tasks received: pulls, gradients, the chief's final pull.
    pub tensor_bytes: u64,
    /// The sidecars' counters.
    pub sidecars: SidecarTotals,
    /// Bytes that crossed the links between pods.
    pub link_bytes: u64,
    /// Bytes the parameter task's link carried: (up, down).
    pub ps_link_bytes: (u64, u64),
    /// Variables whose received value was checked against the replicas.
    pub replicas_checked: usize,
    /// Of those, how many disagreed.
    pub replica_mismatches: usize,
}

impl RunReport {
    /// Mean seconds per step.
    pub fn mean_step_seconds(&self) -> f64 {
        self.step_seconds.iter().sum::<f64>() / self.step_seconds.len().max(1) as f64
    }

    /// What the sidecars sent for tensors: envelopes plus the tensors they
    /// passed as they were.
    pub fn payload_bytes(&self) -> u64 {
        self.sidecars.wire() + self.tensor_bytes.saturating_sub(self.sidecars.raw())
    }

    /// Link bytes beyond the payload: framing, headers and requests.
    pub fn overhead_bytes(&self) -> i64 {
        self.link_bytes as i64 - self.payload_bytes() as i64
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

fn eval_pair(ps: &Evaluation, chief: &Evaluation, accuracy: bool) -> String {
    if accuracy {
        format!(
            "{:.2}% / {:.2}%",
            100.0 * ps.accuracy,
            100.0 * chief.accuracy
        )
    } else {
        format!("{:.4} / {:.4}", ps.loss, chief.loss)
    }
}

impl DemoReport {
    /// Step-time speedup of the 3LC run over the baseline.
    pub fn speedup(&self) -> f64 {
        let tlc = self.tlc.mean_step_seconds();
        if tlc > 0.0 {
            self.baseline.mean_step_seconds() / tlc
        } else {
            0.0
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let (b, t) = (&self.baseline, &self.tlc);
        let o = &self.options;
        let rate = match o.rate_mbit {
            Some(r) => format!("{r} Mbit/s each way per pod"),
            None => "unlimited".into(),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tlc-demo: 1 parameter task + {} workers, MLP {:?} ({} parameters, {} of f32), \
             {} synchronous steps of {} examples per worker, links {rate}{}",
            o.workers,
            o.mlp().sizes,
            b.parameters,
            mb(4 * b.parameters as u64),
            o.steps,
            o.batch,
            if o.latency.is_zero() {
                String::new()
            } else {
                format!(" + {} ms latency", o.latency.as_millis())
            },
        );
        let _ = writeln!(out);
        let mut row = |name: &str, base: String, tlc: String, note: String| {
            let _ = writeln!(out, "{name:<40} {base:>18} {tlc:>18}  {note}");
        };
        row("", b.label.clone(), t.label.clone(), String::new());
        row(
            "mean step time",
            format!("{:.3} s", b.mean_step_seconds()),
            format!("{:.3} s", t.mean_step_seconds()),
            format!("speedup {:.1}x", self.speedup()),
        );
        row(
            "training time (incl. final pull)",
            format!("{:.1} s", b.seconds),
            format!("{:.1} s", t.seconds),
            String::new(),
        );
        row(
            "tensor bytes received by TF",
            mb(b.tensor_bytes),
            mb(t.tensor_bytes),
            "f32 values of pulls and gradients".into(),
        );
        row(
            "sidecar raw bytes (compressed tensors)",
            mb(b.sidecars.raw()),
            mb(t.sidecars.raw()),
            format!(
                "push {} pull {}",
                mb(t.sidecars.push_raw),
                mb(t.sidecars.pull_raw)
            ),
        );
        row(
            "sidecar wire bytes (their envelopes)",
            mb(b.sidecars.wire()),
            mb(t.sidecars.wire()),
            format!(
                "ratio {:.1}x (push {:.1}x, pull {:.1}x incl. keyframes)",
                ratio(t.sidecars.raw(), t.sidecars.wire()),
                ratio(t.sidecars.push_raw, t.sidecars.push_wire),
                ratio(t.sidecars.pull_raw, t.sidecars.pull_wire)
            ),
        );
        row(
            "sidecar payload (+ uncompressed tensors)",
            mb(b.payload_bytes()),
            mb(t.payload_bytes()),
            String::new(),
        );
        row(
            "link bytes (relay counters)",
            mb(b.link_bytes),
            mb(t.link_bytes),
            format!("{:.1}x less", ratio(b.link_bytes, t.link_bytes)),
        );
        let overhead = |r: &super::report::RunReport| {
            format!(
                "{:+.1}%",
                100.0 * r.overhead_bytes() as f64 / r.link_bytes.max(1) as f64
            )
        };
        row(
            "  link minus payload (framing, requests)",
            overhead(b),
            overhead(t),
            "of link bytes".into(),
        );
        row(
            "parameter task link up / down",
            format!("{} / {}", mb(b.ps_link_bytes.0), mb(b.ps_link_bytes.1)),
            format!("{} / {}", mb(t.ps_link_bytes.0), mb(t.ps_link_bytes.1)),
            String::new(),
        );
        row(
            "initial test loss",
            format!("{:.4}", b.initial.loss),
            format!("{:.4}", t.initial.loss),
            String::new(),
        );
        row(
            "final train loss (last batch)",
            format!("{:.4}", b.train_loss.last().copied().unwrap_or(0.0)),
            format!("{:.4}", t.train_loss.last().copied().unwrap_or(0.0)),
            String::new(),
        );
        row(
            "final test loss (ps / worker 0)",
            eval_pair(&b.ps_eval, &b.chief_eval, false),
            eval_pair(&t.ps_eval, &t.chief_eval, false),
            String::new(),
        );
        row(
            "final test accuracy (ps / worker 0)",
            eval_pair(&b.ps_eval, &b.chief_eval, true),
            eval_pair(&t.ps_eval, &t.chief_eval, true),
            format!(
                "{:+.2} points (worker 0)",
                100.0 * (t.chief_eval.accuracy - b.chief_eval.accuracy)
            ),
        );
        let health = |r: &RunReport| {
            format!(
                "{}/{}/{}/{}",
                r.sidecars.compressed,
                r.sidecars.restored,
                r.sidecars.decode_failures,
                r.sidecars.fallbacks
            )
        };
        row(
            "compressed/restored/failures/fallbacks",
            health(b),
            health(t),
            String::new(),
        );
        let replicas = |r: &RunReport| {
            format!(
                "{}/{} agree",
                r.replicas_checked - r.replica_mismatches,
                r.replicas_checked
            )
        };
        row(
            "worker 0 model = ps-side replica",
            replicas(b),
            replicas(t),
            String::new(),
        );
        out
    }

    /// One JSON object with the headline figures of both runs.
    pub fn json(&self) -> serde_json::Value {
        let (b, t) = (&self.baseline, &self.tlc);
        json!({
            "steps": self.options.steps,
            "workers": self.options.workers,
            "parameters": b.parameters,
            "rate_mbit": self.options.rate_mbit,
            "latency_ms": self.options.latency.as_secs_f64() * 1e3,
            "sparsity": self.options.sparsity,
            "raw_bytes": t.sidecars.raw(),
            "wire_bytes": t.sidecars.wire(),
            "ratio": ratio(t.sidecars.raw(), t.sidecars.wire()),
            "push_ratio": ratio(t.sidecars.push_raw, t.sidecars.push_wire),
            "pull_ratio": ratio(t.sidecars.pull_raw, t.sidecars.pull_wire),
            "tensor_bytes": t.tensor_bytes,
            "payload_bytes_baseline": b.payload_bytes(),
            "payload_bytes_tlc": t.payload_bytes(),
            "link_bytes_baseline": b.link_bytes,
            "link_bytes_tlc": t.link_bytes,
            "link_ratio": ratio(b.link_bytes, t.link_bytes),
            "step_seconds_baseline": b.mean_step_seconds(),
            "step_seconds_tlc": t.mean_step_seconds(),
            "speedup": self.speedup(),
            "seconds_baseline": b.seconds,
            "seconds_tlc": t.seconds,
            "accuracy_baseline": b.chief_eval.accuracy,
            "accuracy_tlc": t.chief_eval.accuracy,
            "loss_baseline": b.chief_eval.loss,
            "loss_tlc": t.chief_eval.loss,
            "accuracy_ps_baseline": b.ps_eval.accuracy,
            "accuracy_ps_tlc": t.ps_eval.accuracy,
            "loss_ps_baseline": b.ps_eval.loss,
            "loss_ps_tlc": t.ps_eval.loss,
            "initial_loss": b.initial.loss,
            "decode_failures": b.sidecars.decode_failures + t.sidecars.decode_failures,
            "fallbacks": b.sidecars.fallbacks + t.sidecars.fallbacks,
            "restored_tlc": t.sidecars.restored,
            "compressed_tlc": t.sidecars.compressed,
            "replica_mismatches": b.replica_mismatches + t.replica_mismatches,
        })
    }
}

/// Both runs of the demo.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// What was run.
    pub options: DemoOptions,
    /// Uncompressed.
    pub baseline: RunReport,
    /// With 3LC.
    pub tlc: RunReport,
}
