//! The admin token tlcctl sends, where it came from, and what to tell the
//! operator when tlcd refuses it (`401`).
//!
//! With `--token-file PATH` (or `TLC_ADMIN_TOKEN_FILE`) every target gets
//! the token in PATH. Without it, a target on this host's loopback gets
//! the token tlcd wrote for itself when it has no `admin.token_file`:
//! `admin-PORT.token` in `$XDG_RUNTIME_DIR/tlcd/` or `$TMPDIR/tlcd-UID/`
//! (`/tmp` without `TMPDIR`), the places tlcd writes to
//! (`tlc_admin_api::default_token`). Files are read for every request, so
//! a long `tlcctl top` follows a rotated token.

use std::fs;
use std::path::{Path, PathBuf};

use tlc_admin_api::default_token;

/// Where this run's tokens come from.
#[derive(Debug, Clone)]
pub enum Tokens {
    /// `--token-file` / `TLC_ADMIN_TOKEN_FILE`, for every target.
    File(PathBuf),
    /// tlcd's own token file, for loopback targets.
    Default,
    /// The token of the namespace's Secret, for pods reached through
    /// `kubectl port-forward` (`--selector`); `None`: there is no Secret.
    Secret(Option<String>),
}

/// What was sent to one target, to explain a `401`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The token in the `--token-file` file.
    Given(PathBuf),
    /// The token in tlcd's own file for the target's port.
    Found(PathBuf),
    /// No token: none of these files exists.
    NotFound(Vec<PathBuf>),
    /// No token: the target is not on this host's loopback.
    Remote,
    /// The token in the Secret `tlc-admin-token` (`None`: no such Secret).
    Secret(bool),
}

/// The token for one request, if any, and where it came from; `Err` when
/// a file that should hold one cannot be read.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The token.
    pub token: Option<String>,
    /// Where it came from.
    pub source: Source,
}

impl Tokens {
    /// The token to send to a target on `port`, `loopback` or not.
    pub fn choose(&self, loopback: bool, port: u16) -> Result<Choice, String> {
        match self {
            Tokens::File(path) => Ok(Choice {
                token: Some(
                    read(path)
                        .map_err(|why| format!("{why} (--token-file / TLC_ADMIN_TOKEN_FILE)"))?,
                ),
                source: Source::Given(path.clone()),
            }),
            Tokens::Secret(token) => Ok(Choice {
                token: token.clone(),
                source: Source::Secret(token.is_some()),
            }),
            Tokens::Default if !loopback => Ok(Choice {
                token: None,
                source: Source::Remote,
            }),
            Tokens::Default => {
                let candidates = default_token::candidates(port);
                match candidates.iter().find(|p| p.exists()) {
                    Some(path) => Ok(Choice {
                        token: Some(read(path)?),
                        source: Source::Found(path.clone()),
                    }),
                    None => Ok(Choice {
                        token: None,
                        source: Source::NotFound(candidates),
                    }),
                }
            }
        }
    }
}

/// The token in `path`, white space around it dropped.
fn read(path: &Path) -> Result<String, String> {
    let text = fs::read_to_string(path)
        .map_err(|e| format!("cannot read the admin token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the admin token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// The one line a `401` from `target` becomes: which token was sent (or
/// why none was), and how to send the right one.
pub fn refused(target: &str, source: &Source) -> String {
    const HOW: &str = "pass the file tlcd reads (admin.token_file) with --token-file PATH \
                       or TLC_ADMIN_TOKEN_FILE";
    match source {
        Source::Given(path) => format!(
            "tlcd admin at {target} refused the token in {} (wrong, or rotated since): {HOW}",
            path.display()
        ),
        Source::Found(path) => format!(
            "tlcd admin at {target} refused the token in {} (written by another tlcd, or this \
             one has admin.token_file set): {HOW}",
            path.display()
        ),
        Source::NotFound(paths) => format!(
            "tlcd admin at {target} needs a token and none was found (no {}): {HOW}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
        Source::Remote => format!(
            "tlcd admin at {target} needs a token (tlcctl finds tlcd's own token file only for a \
             target on this host's loopback): {HOW}"
        ),
        Source::Secret(true) => format!(
            "tlcd admin at {target} refused the token of the Secret tlc-admin-token (the pod \
             mounts another, or it was rotated since the pod started): {HOW}"
        ),
        Source::Secret(false) => format!(
            "tlcd admin at {target} needs a token and its namespace has no Secret \
             tlc-admin-token: {HOW}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_file_is_read_for_every_target() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("token");
        fs::write(&path, "  secret-token-0123456789\n").unwrap_or_else(|e| panic!("{e}"));
        let tokens = Tokens::File(path.clone());
        let choice = tokens.choose(false, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(choice.token.as_deref(), Some("secret-token-0123456789"));
        assert_eq!(choice.source, Source::Given(path.clone()));
        fs::write(&path, "\n").unwrap_or_else(|e| panic!("{e}"));
        let err = tokens.choose(true, 1).err().unwrap_or_default();
        assert!(err.contains("is empty"), "{err}");
        let missing = Tokens::File(dir.path().join("nope"));
        let err = missing.choose(true, 1).err().unwrap_or_default();
        assert!(
            err.starts_with("cannot read the admin token file ")
                && err.ends_with("(--token-file / TLC_ADMIN_TOKEN_FILE)"),
            "{err}"
        );
    }

    #[test]
    fn remote_targets_get_no_default_token() {
        let choice = Tokens::Default
            .choose(false, 17000)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(choice.token, None);
        assert_eq!(choice.source, Source::Remote);
        assert!(refused("pod-a:17000", &choice.source).contains("--token-file PATH"));
    }
}
