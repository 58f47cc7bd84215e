//! The `TLC_` environment variables that belong to tlcctl, not to tlcd.
//!
//! A sidecar's environment often carries them (README's
//! `export TLC_ADMIN=...`, the pod's `TLC_ADMIN_TOKEN_FILE` for
//! `kubectl exec ... tlcctl`), and tlcd refuses every `TLC_` name it does
//! not know, so that a misspelt setting cannot pass silently. This list is
//! the one place both sides read: tlcctl's tests check that every `env =`
//! of its command line is here, tlcd leaves these alone.

/// Every environment variable tlcctl reads, by exact name.
pub const CLIENT_VARIABLES: &[&str] = &["TLC_ADMIN", "TLC_ADMIN_TOKEN_FILE", "TLC_IMAGE"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_tlc_variables_without_a_table_separator() {
        for name in CLIENT_VARIABLES {
            assert!(name.starts_with("TLC_"), "{name}");
            // A `__` would make it a configuration key of tlcd's.
            assert!(!name.contains("__"), "{name}");
            assert_eq!(name.to_ascii_uppercase(), *name);
        }
    }
}
