//! The log filter (`log.level`, `--log-level`, `RUST_LOG`, `tlcctl
//! log-level`), checked before it is put in force.
//!
//! `tracing`'s filter syntax takes any bare word as a module name: `verbose`
//! or `warning` parse, match no module of tlcd, and silence every line,
//! model-reset errors included, for as long as the process runs. Here each
//! comma-separated directive must be a level, or `TARGET=LEVEL`, with a
//! level tracing knows.

use tracing_subscriber::EnvFilter;

/// The levels a directive may name, quietest first.
pub const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Parses `filter` into the filter to install, or says why it is refused.
pub fn parse(filter: &str) -> Result<EnvFilter, String> {
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err(format!("an empty filter; give a level ({})", levels()));
    }
    for directive in directives.iter().copied() {
        match directive.rsplit_once('=') {
            Some((target, level)) => {
                if target.trim().is_empty() {
                    return Err(format!("'{directive}': no target before '='"));
                }
                if !is_level(level) {
                    return Err(format!(
                        "'{directive}': '{level}' is not a level ({})",
                        levels()
                    ));
                }
            }
            None if !is_level(directive) => {
                return Err(format!(
                    "'{directive}' is not a level ({}); one module's level is \
                     written TARGET=LEVEL, e.g. tlc_sidecar=debug",
                    levels()
                ));
            }
            None => {}
        }
    }
    // Spaces after commas are common in a hand-written filter; tracing
    // would take them as part of the level.
    EnvFilter::try_new(directives.join(",")).map_err(|e| e.to_string())
}

fn is_level(word: &str) -> bool {
    LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word.trim()))
}

fn levels() -> String {
    LEVELS.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_targets_pass() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,tlc_sidecar=debug",
            "warn, tlc_proxy::listener=trace",
            "tlc_daemon[span]=debug",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok).err());
        }
    }

    #[test]
    fn words_that_are_no_level_are_refused() {
        for bad in [
            "verbose",
            "warning",
            "info,tlc_sidecar=loud",
            "",
            " , ",
            "=debug",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(
                err.contains("level") || err.contains("target"),
                "{bad}: {err}"
            );
        }
        assert!(parse("verbose")
            .unwrap_err()
            .contains("off, error, warn, info, debug, trace"));
    }

    #[test]
    fn what_tracing_refuses_is_refused_too() {
        assert!(parse("info,tlc_daemon[=debug").is_err());
    }
}
