//! Arbitrary bytes as a config file and `TLC_*` environment variables:
//! `Config::from_toml`, and the layered resolver (`Layers` with `env`, as
//! tlcd builds it from its environment) over the same file.
//!
//! The input is the file's text up to the first NUL byte (TOML has none),
//! then `NAME=value` lines, one variable each; a name that does not start
//! with `TLC_` or `RUST_LOG` gets `TLC_` in front, and `Layers::env_from`
//! keeps only those that name configuration, as it does for tlcd. Bytes
//! that are not UTF-8 are read lossily.
//!
//! Must hold: no panic; an accepted configuration validates
//! (`Config::validate`), gives the sidecar its bounds (`sidecar_options`)
//! and a policy (`Policy::new`), and written back as TOML reads again as
//! the same configuration. Seeds: the README's examples
//! (`cargo run --bin seeds -- corpus`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_daemon::config::layers::Layers;
use tlc_daemon::config::Config;
use tlc_sidecar::policy::Policy;

fuzz_target!(|input: &[u8]| {
    let (file, env) = match input.iter().position(|&b| b == 0) {
        Some(at) => (&input[..at], &input[at + 1..]),
        None => (input, &[][..]),
    };
    let file = String::from_utf8_lossy(file).into_owned();
    let env = String::from_utf8_lossy(env);

    if let Ok(config) = Config::from_toml(&file) {
        check(&config);
    }

    let vars = env.lines().filter_map(|line| {
        let (name, value) = line.split_once('=')?;
        let name = if name.starts_with("TLC_") || name == "RUST_LOG" {
            name.to_string()
        } else {
            format!("TLC_{name}")
        };
        Some((name, value.to_string()))
    });
    let layers = Layers {
        env: Layers::env_from(vars),
        ..Layers::default()
    };
    if let Ok(resolved) = layers.resolve_with(Some(file)) {
        check(&resolved.config);
    }
});

/// What an accepted configuration must be.
fn check(config: &Config) {
    config.validate().expect("an accepted config validates");
    config.sidecar_options().expect("and bounds the sidecar");
    Policy::new(&config.policy).expect("and makes a policy");
    let Ok(text) = toml::to_string(config) else {
        // Some values have no TOML form (an empty table in an array);
        // tlcd never writes TOML, the admin API answers in JSON.
        return;
    };
    let again =
        Config::from_toml(&text).unwrap_or_else(|e| panic!("written back, refused: {e}\n{text}"));
    assert_eq!(&again, config, "written back:\n{text}");
}
