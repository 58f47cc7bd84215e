//! Tests of [`super`]: the `refine` module's bounds.

use super::*;

fn refine(toml_text: &str) -> Result<Refine, ConfigError> {
    let settings: RefineSettings = toml::from_str(toml_text).expect("test TOML parses");
    Refine::new(&settings)
}

#[test]
fn synchronous_training_gets_its_own_targets() {
    let r = refine("").unwrap();
    let pull = |target, scale| Refinement {
        target,
        max_passes: 8,
        scale,
        peak_lag: f64::INFINITY,
        peak_half_life: 20.0,
        regimes: Regimes::OFF,
    };
    assert_eq!(r.pull(false), pull(0.01, PassScale::Max));
    assert_eq!(r.pull(true), pull(0.01, PassScale::Max));
    assert_eq!(
        r.push(false, false),
        Refinement {
            target: 0.5,
            max_passes: 8,
            scale: PassScale::Max,
            peak_lag: 1.0,
            peak_half_life: 20.0,
            // The controller: 0.5 while critical, by the workers'
            // agreement and a rising norm.
            regimes: Regimes {
                critical_lag: 0.5,
                window: 10,
                change: f64::INFINITY,
                backlog: 4.0,
                rise: 0.5,
                agreement: 0.2,
            },
        }
    );
    // Both push bounds take the peak lag and the controller,
    // synchronous or not; pulls have no controller.
    assert_eq!(r.push(true, false).peak_lag, 1.0);
    assert!(r.push(true, false).regimes.is_on());
    assert!(r.push(true, false).regimes.asks_agreement());
    assert_eq!(r.push(true, false).regimes.lag(1.0, true), 0.5);
    assert_eq!(r.push(true, false).regimes.lag(1.0, false), 1.0);
    assert_eq!(r.push(true, false).regimes, r.push(false, false).regimes);
    assert_eq!(r.push(true, true).regimes, r.push(false, false).regimes);
    assert!(!r.pull(true).regimes.is_on());
    // An unbounded target never asks for a second pass.
    assert!(!r.push(true, false).another_pass(1, 1e30));
    let r =
        refine("pull_max_passes = 3\n[synchronous]\npull_max_drift = 0.2\npush_max_error = 1.5\n")
            .unwrap();
    assert_eq!(
        r.pull(true),
        Refinement {
            target: 0.2,
            max_passes: 3,
            scale: PassScale::Max,
            peak_lag: f64::INFINITY,
            peak_half_life: 20.0,
            regimes: Regimes::OFF,
        }
    );
    assert_eq!(r.push(true, false).target, 1.5);
    let r = refine("pull_max_lag = 0.25\npush_max_lag = inf\n").unwrap();
    assert_eq!(r.pull(true).peak_lag, 0.25);
    assert_eq!(r.pull(false).peak_lag, 0.25);
    assert_eq!(r.push(true, false).peak_lag, f64::INFINITY);
    assert!(refine("push_max_lag = 0\n").is_err());
    let r = refine("peak_half_life = 40\n").unwrap();
    assert_eq!(r.push(true, false).peak_half_life, 40.0);
    assert_eq!(r.pull(false).peak_half_life, 40.0);
    assert!(refine("peak_half_life = 0.5\n").is_err());
    assert!(refine("peak_half_life = nan\n").is_err());
    let r =
        refine("pull_pass_scale = \"toward\"\n[synchronous]\npull_pass_scale = \"max\"\n").unwrap();
    assert_eq!(r.pull(false).scale, PassScale::Toward);
    assert_eq!(r.pull(true).scale, PassScale::Max);
    // Pushes refine at 3LC's own scale whatever the pulls do ...
    assert_eq!(r.push(false, false).scale, PassScale::Max);
    // ... unless told otherwise, synchronous or not.
    let r2 = refine("push_pass_scale = \"toward\"\n").unwrap();
    assert_eq!(r2.push(true, false).scale, PassScale::Toward);
    assert_eq!(r2.push(false, false).scale, PassScale::Toward);
    assert_eq!(r2.pull(true).scale, PassScale::Max);
    // Rows have their own scale, in both directions.
    assert_eq!(r.rows(r.pull(false)).scale, PassScale::Toward);
    let r = refine("rows_pass_scale = \"max\"\n").unwrap();
    assert_eq!(r.rows(r.push(false, false)).scale, PassScale::Max);
    assert_eq!(r.rows(r.pull(true)).target, 0.01);
    assert_eq!(r.pull(true).scale, PassScale::Max);
}

#[test]
fn adaptive_gradients_get_the_tighter_bound_every_push() {
    let r = refine("").unwrap();
    let sync = r.push(true, true);
    assert_eq!(sync.target, 0.45, "synchronous alone would be inf");
    assert_eq!(sync.scale, PassScale::Toward);
    assert_eq!(sync.peak_lag, 1.0);
    assert_eq!(r.push(false, true).target, 0.45);
    assert!(sync.another_pass(1, 0.5));
    assert!(!r.push(true, false).another_pass(1, 0.3));
    // The training's own bound wins where it is tighter.
    let r = refine("push_max_error = 0.1\n[adaptive]\npush_max_error = 0.5\n").unwrap();
    assert_eq!(r.push(false, true).target, 0.1);
    assert_eq!(r.push(true, true).target, 0.5);
    let r = refine("[adaptive]\npush_max_error = inf\npush_pass_scale = \"max\"\n").unwrap();
    assert_eq!(r.push(true, true), r.push(true, false));
    let err = refine("[adaptive]\npush_max_error = 0\n").unwrap_err();
    assert!(err
        .to_string()
        .starts_with("policy.refine.adaptive.push_max_error = 0"));
    let typo = toml::from_str::<RefineSettings>("[adaptive]\npush_max_eror = 0.2\n");
    assert!(typo.is_err(), "unknown keys are refused");
}

#[test]
fn bad_values_name_their_key() {
    for (toml, message) in [
        (
            "pull_max_passes = 0\n",
            "policy.refine.pull_max_passes = 0: 1 to 16 (1 = off)",
        ),
        (
            "push_max_passes = 9\n",
            "policy.refine.push_max_passes = 9: 1 to 8 (1 = off)",
        ),
        (
            "pull_max_drift = 100.5\n",
            "policy.refine.pull_max_drift = 100.5: a number above 0 and at most 100, or inf (no bound)",
        ),
    ] {
        assert_eq!(refine(toml).unwrap_err().to_string(), message);
    }
    // Only how each starts: the rest says what the value should be.
    for (toml, starts) in [
        (
            "pull_max_drift = -0.1\n",
            "policy.refine.pull_max_drift = -0.1",
        ),
        (
            "push_max_error = nan\n",
            "policy.refine.push_max_error = NaN",
        ),
        (
            "[synchronous]\npull_max_drift = 0\n",
            "policy.refine.synchronous.pull_max_drift = 0",
        ),
    ] {
        let err = refine(toml).unwrap_err();
        assert!(err.to_string().starts_with(starts), "{err}");
    }
    refine("pull_max_drift = 100\n").unwrap();
    assert!(toml::from_str::<RefineSettings>("scope = \"all\"\n").is_err());
    for (table, key) in [
        ("window = 0", "window = 0"),
        ("window = 10001", "window = 10001"),
        ("change = 0", "change = 0"),
        ("change = nan", "change = NaN"),
        ("push_max_lag = 0", "push_max_lag = 0"),
        ("backlog = -1", "backlog = -1"),
        ("agreement = 1.5", "agreement = 1.5"),
        ("rise = 0", "rise = 0"),
        ("agreement = -inf", "agreement = -inf"),
        ("agreement = nan", "agreement = NaN"),
    ] {
        let err = refine(&format!("[critical]\n{table}\n")).unwrap_err();
        let named = format!("policy.refine.critical.{key}");
        assert!(err.to_string().starts_with(&named), "{err}");
    }
}

#[test]
fn the_controller_is_one_table_and_turns_off_with_inf() {
    let r = refine(
        "[critical]\npush_max_lag = 0.25\nwindow = 5\nchange = 1\nbacklog = inf\nagreement = 0.1\n",
    )
    .unwrap();
    assert_eq!(
        r.push(false, false).regimes,
        Regimes {
            critical_lag: 0.25,
            window: 5,
            change: 1.0,
            backlog: f64::INFINITY,
            rise: 0.5,
            agreement: 0.1,
        }
    );
    assert!(r.push(true, false).regimes.asks_agreement());
    let r = refine("[critical]\npush_max_lag = inf\n").unwrap();
    assert!(!r.push(true, false).regimes.is_on());
    assert!(refine("[critical]\nchange = inf\n").is_ok());
}
