//! The `[policy.refine]` table: how far 3LC's memory may lag behind the
//! tensors it stands for before another pass is sent (see
//! [`tlc_context::refine`] for why and how).
//!
//! ```toml
//! [policy.refine]                # training asynchronous, or not known
//! pull_max_drift = 0.01          # replica within 1% (L2) of the model after an update
//! pull_max_passes = 8            # 3LC passes (versions) per update at most; 1 = off
//! pull_pass_scale = "max"        # later passes: "max" (3LC's M = max|acc| s) or "toward" the target
//! push_max_error = 0.5           # error buffer at most 0.5x the gradient (L2) after a push
//! push_max_passes = 8            # frames per gradient at most (1..=8); 1 = off
//! push_max_lag = 1               # and error buffer at most 1x the stream's recent largest gradient (L2); 0.5 while critical
//! push_pass_scale = "max"        # later frames: "max" (3LC's M = max|acc| s) or "toward" the target
//! pull_max_lag = inf             # and replica at most this x the source's largest update (L2) off
//! peak_half_life = 20            # the largest gradient / update forgets over this many (inf: never)
//! rows_pass_scale = "toward"     # embedding rows' later passes, pulls and pushes: "max" or "toward"
//!
//! [policy.refine.synchronous]    # the graph shows every gradient accumulated
//! pull_max_drift = 0.01
//! pull_pass_scale = "max"
//! push_max_error = inf           # no bound: 3LC's single pass
//!
//! [policy.refine.adaptive]       # gradients an adaptive optimizer applies (Adam, Adagrad, RMSProp...)
//! push_max_error = 0.45          # error buffer at most 0.45x the gradient after every push, sync or not
//! push_pass_scale = "toward"
//!
//! [policy.refine.critical]       # the fidelity controller: a gradient stream in a critical regime
//! push_max_lag = 0.5             # error buffer at most this x the recent largest gradient while critical (inf: off)
//! window = 10                    # pushes per window; a new stream's first two windows are critical
//! change = inf                   # a window's RMS gradient norm 1 + change or 1/(1 + change) times the last makes the next critical (inf: never)
//! backlog = 4                    # an error buffer above 4x the window's RMS gradient makes the next critical
//! rise = 0.5                     # a window's RMS gradient norm above 1 + rise times the least of the 3 before makes the next critical
//! agreement = 0.2                # the workers' decoded pushes (whole gradient, per parameter task) agreeing this much, or not measured, make a push critical (inf: not asked)
//! ```
//!
//! Dense pushes refine at 3LC's own scale unless `push_pass_scale` says
//! "toward". Rows by row id
//! (embedding rows and their gradients) refine toward the target in both
//! directions: the passes their bounds need cost 14–17% fewer bytes on
//! the embedding model that way (sync 2 ps 18.8 -> 16.2 MB over 300
//! steps, async 1 ps 11.5 -> 10.1 MB) with the same accuracy over three
//! seeds (docs/COMPRESSION.md, "Embedding rows"). Dense passes toward the target
//! (`pull_pass_scale = "toward"`) stop close to the bound instead of below
//! it: fewer bytes, but the bound then means more. Tried again under
//! today's push bounds on synchronous pulls, it was level on the zoo's
//! tune half with 1–11% fewer bytes on the hop, but the harness MLP lost
//! 1.39, 0.56 and 0.28 points on three more seeds, paired, and the TF1
//! async MLP lost 7.5 points in one run of nine: dense pulls stay at
//! 3LC's scale (see [`tlc_context::refine`] and docs/FIDELITY.md).
//!
//! Synchronous training (`SyncReplicasOptimizer`: gradients accumulated,
//! applied once per step) tolerates 3LC's lag on gradients, as the 3LC
//! paper found, but not on model values: with single-pass pulls the TF1
//! MLP lost 3.6 points from its zero-initialised 1024-value bias alone
//! (its own norm is small, so one pass leaves it 10–100% off). With a 5%
//! bound it still lost 5.0 points on one seed of three (ResNet-20 1.6);
//! with 2% CI's small MLP lost 1.1 (its 2560-value logits layer); at 1%
//! none of them lost more than half a point (docs/COMPRESSION.md, "Refinement"). The
//! table stays separate so an operator can trade accuracy for bytes on
//! synchronous jobs alone.
//!
//! An adaptive optimizer is the exception to that tolerance. Its update
//! divides each element by a running mean of that element's squared
//! gradient. Error feedback keeps the *sum* of the gradients it sees right,
//! but an element that 3LC sends as a rare `±M` spike instead of a small
//! value every step gets a mean of squares that the spikes inflate, and
//! the optimizer moves it less. Adam through single-pass 3LC pushes lost
//! 1.25 points on the zoo's tune-half MLP (mlpadam), with kernels 10%
//! smaller than without. Bounding every push's error to a quarter of the
//! gradient, with frames toward that bound, took it to −0.53; 0.45, the
//! default, sends a fifth fewer bytes at −0.73 (paired −0.21 [−0.50,
//! +0.09] over five seeds): a trade made for the bytes, judged on the
//! zoo's held-out half (docs/FIDELITY.md). The graph says which optimizer
//! a task runs ([`crate::graph`]).
//!
//! `[policy.refine.critical]` is the fidelity controller
//! ([`tlc_context::regime`]): a stream whose gradient norms change fast
//! or climb (its first pushes, a plateau left, a rate changed), whose
//! buffer holds a backlog, or whose workers' gradients agree (as the
//! parameter task's sidecar measures them, `agreement`) is critical, and
//! its lag bound tightens to the table's `push_max_lag` while it is. A
//! push whose stream's agreement is not measured (asynchronous training,
//! a gradient not collected by an accumulator, an older peer) is always
//! critical. By default the bound is 1 when calm and 0.5 while critical;
//! a stream is critical while the whole gradient's agreement is at least
//! 0.2, or for the window after its norm climbed by half over three
//! windows of 10. Against a fixed bound of 0.5 that gives the harness MLP
//! back part of its bytes (34x -> 37.5-40.5x on the hop) and densesgd
//! most of them (8.5x -> 10.0x) at the same accuracy, level on the zoo's
//! conv net over 20 seeds (docs/FIDELITY.md, "The fidelity controller").

use serde::{Deserialize, Serialize};

use tlc_context::{PassScale, Refinement, Regimes};
use tlc_core::ConfigError;
use tlc_wire::envelope::MAX_PUSH_FRAMES;

/// The `[policy.refine]` table as written in the file: the bounds where
/// training is asynchronous or not known, and those for synchronous
/// training.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RefineSettings {
    /// Pulls: further passes while `‖V − R‖₂ / ‖V‖₂` is above this.
    pub pull_max_drift: f64,
    /// Pulls: passes per update at most, the first included (1 = off).
    pub pull_max_passes: u32,
    /// Pulls: how passes after the first pick their scale.
    pub pull_pass_scale: PassScale,
    /// Pushes: further frames while `‖e‖₂ / ‖g‖₂` is above this.
    pub push_max_error: f64,
    /// Pushes: frames per gradient at most, the first included (1 = off).
    pub push_max_passes: u32,
    /// Pushes: how frames after the first pick their scale. At 3LC's own
    /// scale a frame of the error buffer sends only what is above half its
    /// largest element: where a few elements dwarf the rest (a large
    /// dense layer's gradient) the bulk waits, frame after frame. Toward
    /// the target, `M` is lowered until the frame leaves the error the
    /// bound allows.
    pub push_pass_scale: PassScale,
    /// Pushes, asynchronous and synchronous: further frames (within
    /// `push_max_passes`) while `‖e‖₂` is above this times the largest
    /// `‖g‖₂` the stream has pushed (`inf`: no such bound). Tight while
    /// gradients are as large as they have been, loose once they decay:
    /// see `tlc_context::Refinement::peak_lag`.
    pub push_max_lag: f64,
    /// Pulls, asynchronous and synchronous: further passes (within
    /// `pull_max_passes`) while `‖V − R‖₂` is above this times the largest
    /// update `‖V − R₀‖₂` the source has carried (`inf`: no such bound).
    pub pull_max_lag: f64,
    /// Pushes and pulls: the half-life, in gradients pushed or updates
    /// pulled, of the largest change `push_max_lag` and `pull_max_lag` are
    /// against (`inf`: the largest ever); see
    /// `tlc_context::Refinement::peak_half_life`.
    pub peak_half_life: f64,
    /// Rows by row id (embedding rows pulled, their gradients pushed): how
    /// passes after the first pick their scale, both directions.
    pub rows_pass_scale: PassScale,
    /// The targets where the graph shows synchronous training.
    pub synchronous: SynchronousTargets,
    /// The targets for gradients an adaptive optimizer applies.
    pub adaptive: AdaptiveTargets,
    /// The fidelity controller: the push lag bound while critical.
    pub critical: CriticalSettings,
}

/// `[policy.refine.critical]`: the fidelity controller (`push_max_lag =
/// inf` turns it off). A dense gradient stream is critical during its
/// first two windows of pushes, for the window after one whose RMS
/// gradient norm changed by more than `change` either way, climbed by more
/// than `rise`, or that ended with a backlog, and while its workers agree
/// (`agreement`); while critical, its error buffer is held within
/// `push_max_lag` times the recent largest gradient (the tighter of this
/// and `[policy.refine] push_max_lag`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriticalSettings {
    /// The peak-lag bound while critical (`inf`: the controller is off).
    pub push_max_lag: f64,
    /// Pushes per window.
    pub window: u32,
    /// The relative change of a window's RMS gradient norm that marks the
    /// next window critical.
    pub change: f64,
    /// The error buffer, in RMS gradients of the window, above which the
    /// next window is critical (`inf`: never).
    pub backlog: f64,
    /// How far a window's RMS gradient norm may climb above the least of
    /// the windows before it before the next window is critical (`inf`:
    /// never).
    pub rise: f64,
    /// The workers' agreement (as the parameter task's sidecar measures
    /// it on their decoded pushes, −1 to 1) at or above which a push is
    /// critical; a push whose requester measured none is critical too
    /// (`inf`: agreement is not measured or asked for).
    pub agreement: f64,
}

impl Default for CriticalSettings {
    fn default() -> Self {
        CriticalSettings {
            push_max_lag: 0.5,
            window: 10,
            change: f64::INFINITY,
            backlog: 4.0,
            rise: 0.5,
            agreement: 0.2,
        }
    }
}

/// `[policy.refine.adaptive]`: the push bound for a dense gradient that an
/// adaptive optimizer applies (Adam, Adagrad, RMSProp...), synchronous or
/// not. The tighter of this and the training's own bound applies; the pass
/// budget is the table's.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveTargets {
    /// Further frames while `‖e‖₂ / ‖g‖₂` is above this (`inf`: none
    /// beyond the training's own).
    pub push_max_error: f64,
    /// How frames after the first pick their scale.
    pub push_pass_scale: PassScale,
}

impl Default for AdaptiveTargets {
    fn default() -> Self {
        AdaptiveTargets {
            push_max_error: 0.45,
            push_pass_scale: PassScale::Toward,
        }
    }
}

/// `[policy.refine.synchronous]`: the targets for a tensor the graph shows
/// to belong to synchronous training (a gradient collected by an
/// accumulator, a value read from a task whose every gradient is). The
/// pass budgets are the table's.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynchronousTargets {
    /// Pulls: further passes while `‖V − R‖₂ / ‖V‖₂` is above this.
    pub pull_max_drift: f64,
    /// Pulls: how passes after the first pick their scale.
    pub pull_pass_scale: PassScale,
    /// Pushes: further frames while `‖e‖₂ / ‖g‖₂` is above this (`inf`:
    /// none).
    pub push_max_error: f64,
}

impl Default for SynchronousTargets {
    fn default() -> Self {
        SynchronousTargets {
            pull_max_drift: 0.01,
            pull_pass_scale: PassScale::Max,
            push_max_error: f64::INFINITY,
        }
    }
}

impl Default for RefineSettings {
    /// Measured on TensorFlow 2.21 jobs (docs/COMPRESSION.md, "Refinement").
    fn default() -> Self {
        RefineSettings {
            pull_max_drift: 0.01,
            pull_max_passes: 8,
            pull_pass_scale: PassScale::Max,
            push_max_error: 0.5,
            push_max_passes: 8,
            push_pass_scale: PassScale::Max,
            push_max_lag: 1.0,
            pull_max_lag: f64::INFINITY,
            peak_half_life: 20.0,
            rows_pass_scale: PassScale::Toward,
            synchronous: SynchronousTargets::default(),
            adaptive: AdaptiveTargets::default(),
            critical: CriticalSettings::default(),
        }
    }
}

/// Pass budgets above this are refused: each pass is a version to cache.
const MAX_PULL_PASSES: u32 = 16;

/// The validated table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refine {
    pull: Refinement,
    push: Refinement,
    synchronous_pull: Refinement,
    synchronous_push: Refinement,
    adaptive_push: Refinement,
    rows_scale: PassScale,
}

impl Refine {
    /// Validates the table, naming the first bad key.
    pub fn new(settings: &RefineSettings) -> Result<Refine, ConfigError> {
        let pull_passes = passes(
            "policy.refine.pull_max_passes",
            settings.pull_max_passes,
            MAX_PULL_PASSES,
        )?;
        let push_passes = passes(
            "policy.refine.push_max_passes",
            settings.push_max_passes,
            MAX_PUSH_FRAMES,
        )?;
        let sync = &settings.synchronous;
        let pull_lag = target("policy.refine.pull_max_lag", settings.pull_max_lag)?;
        let push_lag = target("policy.refine.push_max_lag", settings.push_max_lag)?;
        let half_life = half_life("policy.refine.peak_half_life", settings.peak_half_life)?;
        let regimes = regimes(&settings.critical)?;
        let refinement =
            |key: &str, value: f64, max_passes: u32, scale: PassScale, peak_lag: f64| {
                Ok(Refinement {
                    target: target(key, value)?,
                    max_passes,
                    scale,
                    peak_lag,
                    peak_half_life: half_life,
                    regimes: Regimes::OFF,
                })
            };
        let push = |refinement: Result<Refinement, ConfigError>| {
            Ok::<_, ConfigError>(Refinement {
                regimes,
                ..refinement?
            })
        };
        Ok(Refine {
            pull: refinement(
                "policy.refine.pull_max_drift",
                settings.pull_max_drift,
                pull_passes,
                settings.pull_pass_scale,
                pull_lag,
            )?,
            push: push(refinement(
                "policy.refine.push_max_error",
                settings.push_max_error,
                push_passes,
                settings.push_pass_scale,
                push_lag,
            ))?,
            synchronous_pull: refinement(
                "policy.refine.synchronous.pull_max_drift",
                sync.pull_max_drift,
                pull_passes,
                sync.pull_pass_scale,
                pull_lag,
            )?,
            synchronous_push: push(refinement(
                "policy.refine.synchronous.push_max_error",
                sync.push_max_error,
                push_passes,
                settings.push_pass_scale,
                push_lag,
            ))?,
            adaptive_push: push(refinement(
                "policy.refine.adaptive.push_max_error",
                settings.adaptive.push_max_error,
                push_passes,
                settings.adaptive.push_pass_scale,
                push_lag,
            ))?,
            rows_scale: settings.rows_pass_scale,
        })
    }

    /// The refinement of a pull replica's updates; `synchronous` is
    /// whether the graph shows the holding task's training synchronous.
    pub fn pull(&self, synchronous: bool) -> Refinement {
        if synchronous {
            self.synchronous_pull
        } else {
            self.pull
        }
    }

    /// The refinement of rows by row id: `pull`'s or `push`'s bounds with
    /// the rows' own pass scale.
    pub fn rows(&self, of: Refinement) -> Refinement {
        Refinement {
            scale: self.rows_scale,
            ..of
        }
    }

    /// The refinement of a dense gradient; `synchronous` is whether the
    /// graph shows it collected by an accumulator rather than applied on
    /// arrival, `adaptive` whether an adaptive optimizer applies it. For an
    /// adaptive gradient the tighter target applies, with the adaptive
    /// table's pass scale.
    pub fn push(&self, synchronous: bool, adaptive: bool) -> Refinement {
        let training = if synchronous {
            self.synchronous_push
        } else {
            self.push
        };
        if !adaptive {
            return training;
        }
        Refinement {
            target: training.target.min(self.adaptive_push.target),
            scale: self.adaptive_push.scale,
            ..training
        }
    }
}

/// Largest finite relative error target. A target of 100 (the residue a
/// hundred times the tensor) already never asks for a second pass; a
/// larger finite number is a typo for `inf`.
const MAX_TARGET: f64 = 100.0;

/// A relative error target: above 0 and at most [`MAX_TARGET`]; `inf`
/// means no bound.
fn target(key: &str, value: f64) -> Result<f64, ConfigError> {
    if (value > 0.0 && value <= MAX_TARGET) || value == f64::INFINITY {
        Ok(value)
    } else {
        Err(invalid(
            key,
            value.to_string(),
            "a number above 0 and at most 100, or inf (no bound)",
        ))
    }
}

/// The `[policy.refine.critical]` table as the controller takes it.
fn regimes(critical: &CriticalSettings) -> Result<Regimes, ConfigError> {
    let window = critical.window;
    if !(1..=MAX_WINDOW).contains(&window) {
        return Err(invalid(
            "policy.refine.critical.window",
            window.to_string(),
            &format!("1 to {MAX_WINDOW} pushes"),
        ));
    }
    let change = critical.change;
    if change.is_nan() || change <= 0.0 {
        return Err(invalid(
            "policy.refine.critical.change",
            change.to_string(),
            "a number above 0, or inf (the norm's changes never mark a regime)",
        ));
    }
    let rise = critical.rise;
    if rise.is_nan() || rise <= 0.0 {
        return Err(invalid(
            "policy.refine.critical.rise",
            rise.to_string(),
            "a number above 0, or inf (a climbing norm never marks a regime)",
        ));
    }
    let agreement = critical.agreement;
    if !((-1.0..=1.0).contains(&agreement) || agreement == f64::INFINITY) {
        return Err(invalid(
            "policy.refine.critical.agreement",
            agreement.to_string(),
            "a cosine from -1 to 1, or inf (agreement is not asked for)",
        ));
    }
    Ok(Regimes {
        critical_lag: target("policy.refine.critical.push_max_lag", critical.push_max_lag)?,
        window,
        change,
        backlog: target("policy.refine.critical.backlog", critical.backlog)?,
        rise,
        agreement,
    })
}

/// Windows longer than this are refused: a regime decided once in ten
/// thousand pushes is no regime.
const MAX_WINDOW: u32 = 10_000;

/// A peak's half-life in changes: at least 1, or `inf` (never forgets).
fn half_life(key: &str, value: f64) -> Result<f64, ConfigError> {
    if value >= 1.0 {
        Ok(value)
    } else {
        Err(invalid(
            key,
            value.to_string(),
            "a number of changes, at least 1, or inf (the largest ever)",
        ))
    }
}

fn passes(key: &str, value: u32, max: u32) -> Result<u32, ConfigError> {
    if (1..=max).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
            key,
            value.to_string(),
            &format!("1 to {max} (1 = off)"),
        ))
    }
}

fn invalid(key: &str, value: String, allowed: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value,
        allowed: allowed.into(),
    }
}

#[cfg(test)]
mod tests;
