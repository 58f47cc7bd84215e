//! `TLC_` variables that look like configuration but name no table.
//!
//! Only variables under a known table become configuration
//! ([`Layers::env_from`](super::layers::Layers::env_from)); the rest are a
//! script's or tlcd's own (`TLC_THREADS`). A misspelt table would fall
//! among the rest and its setting silently not apply: this refuses it.

use tlc_core::ConfigError;

use super::layers::TOP_LEVEL;

/// Refuses a `TLC_` variable meant as configuration that names no
/// table: `TLC_POLCY__MIN_BYTES` (a misspelt table), `TLC_POLICY_MIN_BYTES`
/// (one underscore where the table ends).
/// `flags` are the variables tlcd's flags read (`TLC_ADMIN_TOKEN_FILE`),
/// which are not configuration keys but are no mistake either.
pub fn check<'a>(
    names: impl IntoIterator<Item = &'a str>,
    flags: &[&str],
) -> Result<(), ConfigError> {
    for name in names {
        let Some(key) = name.strip_prefix("TLC_") else {
            continue;
        };
        if flags.contains(&name) {
            continue;
        }
        let lower = key.to_lowercase();
        if TOP_LEVEL.contains(&lower.as_str()) {
            continue;
        }
        let hint = match lower.split_once("__") {
            Some((top, _)) if !TOP_LEVEL.contains(&top) => {
                let nearest = TOP_LEVEL.iter().min_by_key(|t| distance(t, top));
                match nearest {
                    Some(t) if distance(t, top) <= 2 => {
                        format!("there is no table '{top}'; did you mean '{t}'?")
                    }
                    _ => format!("there is no table '{top}'"),
                }
            }
            Some(_) => continue,
            None => match TOP_LEVEL
                .iter()
                .find(|t| lower.starts_with(&format!("{t}_")))
            {
                Some(t) => format!(
                    "a table and its key are joined by two underscores: TLC_{}__{}",
                    t.to_uppercase(),
                    &key[t.len() + 1..]
                ),
                None => continue,
            },
        };
        return Err(ConfigError::Merge {
            message: format!(
                "environment variable {name}: {hint} (tables and top-level keys: {})",
                TOP_LEVEL.join(", ")
            ),
        });
    }
    Ok(())
}

/// The edit distance of two short names (a misspelt table's nearest).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misnamed_environment_table_is_refused() {
        let err = check(["TLC_POLCY__MIN_BYTES"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLC_POLCY__MIN_BYTES"), "{err}");
        assert!(err.contains("did you mean 'policy'"), "{err}");
        let err = check(["TLC_POLICY_MIN_BYTES"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLC_POLICY__MIN_BYTES"), "{err}");
        let err = check(["TLC_NONSENSE__X"], &[]).unwrap_err().to_string();
        assert!(err.contains("no table 'nonsense'"), "{err}");
        // Configuration, and a script's or tlcd's own variables, pass.
        check(
            [
                "TLC_POLICY__MIN_BYTES",
                "TLC_DRAIN_SECONDS",
                "TLC_THREADS",
                "TLC_CONFIG",
                "TLC_PYTHON",
                "TLC_LOG_FORMAT",
                "PATH",
            ],
            &["TLC_LOG_FORMAT"],
        )
        .unwrap();
        assert!(check(["TLC_LOG_FORMAT"], &[]).is_err());
    }
}
