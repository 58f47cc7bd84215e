//! The fidelity controller: whether a gradient stream is in a critical
//! regime, where what 3LC holds back costs accuracy, or a calm one, where
//! it only costs a few steps of lag.
//!
//! Compression is not equally safe over a run. Early on, gradients are
//! many times what they become (a small conv net's first pushes are
//! 10–20x its later ones): what 3LC's single pass holds back of them is a
//! backlog of several of today's gradients, released steps later into a
//! model that has moved on. On the zoo's conv net a lag bound that never
//! tightened lost 15 points on average over five seeds, and a bound as
//! tight as the early steps need, kept all run long, cost the harness MLP
//! a third of its bytes (52x -> 34x on the hop) in its calm second half.
//!
//! As Accordion (Agarwal et al., 2021) detects critical regimes from how
//! fast the gradient's norm changes, the detector compares the gradient's
//! RMS norm over one window of pushes with the windows before. A stream is
//! critical during its first two windows (the first has nothing to be
//! compared with), for the window after one whose RMS moved by more than
//! `change` either way from the last, or climbed by more than `rise` above
//! the least of the three before (a model leaving a plateau: 20-40% a
//! window, which `change` misses), and for the window after one that ended
//! with the error buffer above `backlog` times that RMS (a backlog that
//! the calm bound let grow). Windows, not single pushes: one gradient's
//! norm varies 10x from batch to batch on a calm MLP. The state is a few
//! numbers per stream; the decision is made once per window.
//!
//! A push is critical too while the workers' gradients agree
//! ([`agreement`]): the parameter task's sidecar measures it on the
//! decoded pushes of every worker and says it in its requests; a holder
//! that hears nothing (no measure yet, an older peer, asynchronous
//! training) counts it as agreeing.
//!
//! The sidecar keeps it off by default: on the zoo's tune half no setting
//! has yet beaten the fixed bound on the conv net whose plateau the bound
//! exists for (docs/FIDELITY.md, "The fidelity controller").

/// When a stream counts as critical, and how tight its lag bound is then
/// (a push refinement's `regimes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regimes {
    /// The peak-lag bound while critical (`Refinement::peak_lag` applies
    /// when calm; the tighter of the two applies when critical). `inf`
    /// turns the controller off.
    pub critical_lag: f64,
    /// Pushes per window, at least 1.
    pub window: u32,
    /// A window's RMS gradient norm at more than `1 + change` times the
    /// window before, or less than `1 / (1 + change)` of it, makes the
    /// next window critical.
    pub change: f64,
    /// The error buffer's norm above this times the window's RMS gradient
    /// norm, at the window's end, makes the next window critical (`inf`:
    /// never).
    pub backlog: f64,
    /// A window's RMS gradient norm above `1 + rise` times the smallest
    /// of the [`RISE_WINDOWS`] windows before makes the next window
    /// critical (`inf`: never): a norm that climbs, as a model's does
    /// while it leaves a plateau, however slowly per window.
    pub rise: f64,
    /// The workers' gradients agreeing at least this much, as the
    /// requester measures them ([`agreement`]), makes a push critical;
    /// so does a requester that reports nothing. `inf`: agreement is not
    /// asked for (the other rules alone decide).
    pub agreement: f64,
}

impl Regimes {
    /// No controller: the calm bound always.
    pub const OFF: Regimes = Regimes {
        critical_lag: f64::INFINITY,
        window: 1,
        change: f64::INFINITY,
        backlog: f64::INFINITY,
        rise: f64::INFINITY,
        agreement: f64::INFINITY,
    };

    /// Whether the controller can tighten anything.
    pub fn is_on(&self) -> bool {
        self.critical_lag.is_finite()
    }

    /// Whether the requester's measure of the workers' agreement
    /// (`heard`, `None` where it sent none) makes a push critical.
    pub fn agreeing(&self, heard: Option<f64>) -> bool {
        self.agreement.is_finite() && heard.is_none_or(|a| a.is_nan() || a >= self.agreement)
    }

    /// Whether the requester should measure agreement for the holder.
    pub fn asks_agreement(&self) -> bool {
        self.is_on() && self.agreement.is_finite()
    }

    /// The peak-lag bound for a stream whose regime is `critical`, given
    /// the calm one.
    pub fn lag(&self, calm_lag: f64, critical: bool) -> f64 {
        if critical {
            calm_lag.min(self.critical_lag)
        } else {
            calm_lag
        }
    }
}

/// Windows a rising norm is measured against.
pub const RISE_WINDOWS: usize = 3;

/// One stream's detector: the window so far and the ones before.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegimeDetector {
    /// `Σ ‖g‖₂²` over the window so far.
    window_squares: f64,
    /// Pushes in the window so far.
    window_pushes: u32,
    /// The mean `‖g‖₂²` of the last [`RISE_WINDOWS`] complete windows
    /// (0: none yet), the newest at `(windows - 1) % RISE_WINDOWS`.
    recent_mean_squares: [f64; RISE_WINDOWS],
    /// Complete windows.
    windows: u64,
    /// The regime of the current window, by the window rules.
    calm: bool,
    /// What the requester last said of the workers' agreement.
    heard: Option<f64>,
    /// Pushes seen in a critical regime.
    critical_pushes: u64,
}

impl RegimeDetector {
    /// Whether the window rules make the stream critical now (the
    /// regime the next gradient is encoded in, but for agreement).
    pub fn critical(&self) -> bool {
        !self.calm
    }

    /// The regime the next gradient is encoded in, by every rule of
    /// `regimes` (`true`: critical).
    pub fn critical_under(&self, regimes: &Regimes) -> bool {
        self.critical() || regimes.agreeing(self.heard)
    }

    /// Takes the requester's word on the workers' agreement for the next
    /// gradient (`None`: it said nothing, which counts as agreeing).
    pub fn hear(&mut self, agreement: Option<f64>) {
        self.heard = agreement;
    }

    /// What the requester last said of the workers' agreement.
    pub fn heard(&self) -> Option<f64> {
        self.heard
    }

    /// Gradients encoded while critical, for the operator.
    pub fn critical_pushes(&self) -> u64 {
        self.critical_pushes
    }

    /// Counts one gradient (`gradient_squares` = `‖g‖₂²`) in the current
    /// regime and returns that regime (`true`: critical). At a window's
    /// end, decides the next window's regime from this window's RMS norm
    /// and `error_squares`, the error buffer's `‖e‖₂²` after this push's
    /// first frame. A gradient that is not finite counts in the regime
    /// but not in the norms.
    pub fn observe(
        &mut self,
        regimes: &Regimes,
        gradient_squares: f64,
        error_squares: f64,
    ) -> bool {
        let critical = self.critical_under(regimes);
        if critical {
            self.critical_pushes += 1;
        }
        if gradient_squares.is_finite() {
            self.window_squares += gradient_squares;
        }
        self.window_pushes += 1;
        if self.window_pushes >= regimes.window.max(1) {
            let mean = self.window_squares / f64::from(self.window_pushes);
            let rising = self.rising(mean, regimes.rise);
            self.calm = self.previous_mean_squares().is_some_and(|previous| {
                steady(previous, mean, regimes.change)
                    && !backlogged(error_squares, mean, regimes.backlog)
                    && !rising
            });
            self.recent_mean_squares[(self.windows % RISE_WINDOWS as u64) as usize] = mean;
            self.windows += 1;
            self.window_squares = 0.0;
            self.window_pushes = 0;
        }
        critical
    }
}

impl RegimeDetector {
    /// The last complete window's mean `‖g‖₂²`; `None` before the first.
    fn previous_mean_squares(&self) -> Option<f64> {
        let last = self.windows.checked_sub(1)?;
        Some(self.recent_mean_squares[(last % RISE_WINDOWS as u64) as usize])
    }

    /// Whether a window of mean square `mean` has an RMS norm above
    /// `1 + rise` times the smallest of the windows before it (those
    /// there are, up to [`RISE_WINDOWS`]).
    fn rising(&self, mean: f64, rise: f64) -> bool {
        let known = (self.windows as usize).min(RISE_WINDOWS);
        if !rise.is_finite() || known == 0 {
            return false;
        }
        let smallest = self.recent_mean_squares[..known]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let limit = (1.0 + rise) * (1.0 + rise);
        mean > limit * smallest
    }
}

/// Whether the RMS norm moved by at most `change` either way from the
/// window whose mean square was `previous` to the one whose is `now`.
fn steady(previous: f64, now: f64, change: f64) -> bool {
    if previous == 0.0 || now == 0.0 {
        return previous == now;
    }
    let ratio = (now / previous).sqrt();
    let limit = 1.0 + change;
    ratio <= limit && ratio >= 1.0 / limit
}

/// Whether the error buffer holds more than `backlog` RMS gradients.
fn backlogged(error_squares: f64, mean_squares: f64, backlog: f64) -> bool {
    backlog.is_finite() && error_squares > backlog * backlog * mean_squares
}

pub mod agreement;
#[cfg(test)]
mod tests;
