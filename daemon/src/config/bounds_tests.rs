//! Every whole-number bound of [`tlc_core::bounds`], tried through the
//! whole configuration: its largest value is taken and one more is refused
//! with the key named.

use tlc_core::bounds::*;

use crate::config::Config;

/// `key = value` as a TOML line under its table.
fn toml(key: &str, value: u64) -> String {
    match key.rsplit_once('.') {
        Some((table, name)) => format!("[{table}]\n{name} = {value}\n"),
        None => format!("{key} = {value}\n"),
    }
}

#[test]
fn every_bound_accepts_its_max_and_refuses_one_more() {
    let keys = [
        ("drain_seconds", DRAIN_SECONDS),
        ("contexts.memory_mib", MEMORY_MIB),
        ("contexts.idle_seconds", IDLE_SECONDS),
        ("contexts.pull_cache", PULL_CACHE),
        ("contexts.fallback_mib", FALLBACK_MIB),
        ("policy.min_bytes", MIN_BYTES),
        ("policy.min_vector_bytes", MIN_BYTES),
        ("policy.min_row_bytes", MIN_BYTES),
        ("policy.warmup_steps", WARMUP_STEPS),
        ("recovery.stall_warn_seconds", STALL_WARN_SECONDS),
        ("recovery.stall_fail_seconds", STALL_WARN_SECONDS),
    ];
    for (key, range) in keys {
        Config::from_toml(&toml(key, range.max)).unwrap_or_else(|e| panic!("{key}: {e}"));
        Config::from_toml(&toml(key, range.min)).unwrap_or_else(|e| panic!("{key}: {e}"));
        let err = Config::from_toml(&toml(key, range.max + 1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{key} = {}: {}", range.max + 1, range.describe())
        );
        if range.min > 0 {
            let err = Config::from_toml(&toml(key, range.min - 1)).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("{key} = 0: ")),
                "{err}"
            );
        }
    }
}

#[test]
fn the_review_s_memory_budget_is_refused() {
    let err = Config::from_toml("[contexts]\nmemory_mib = 99999999\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "contexts.memory_mib = 99999999: 1 to 1048576 (MiB, 1 TiB)"
    );
}

#[test]
fn overrides_are_counted() {
    let one = "[[policy.overrides]]\ntensor = \"*x*\"\nskip = true\n";
    let at_max = one.repeat(OVERRIDES.max as usize);
    assert_eq!(
        Config::from_toml(&at_max).unwrap().policy.overrides.len(),
        1024
    );
    let err = Config::from_toml(&(at_max + one)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy.overrides = 1025: 0 to 1024 (entries)"
    );
}
