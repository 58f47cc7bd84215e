//! The bearer token the admin API asks for, and the file it comes from.
//!
//! A token file configured by the operator (`admin.token_file`, typically
//! a Kubernetes Secret) is re-read when it changes, so rotating the Secret
//! needs no restart. Kubernetes rotates a Secret by swapping a symlink
//! (`token -> ..data/token`, `..data` replaced), which a watch on the
//! file's own inode would miss; so each request compares the file's
//! identity and times as `stat` sees them through the symlinks (one system
//! call), re-reads it when they changed, and re-reads it at most once a
//! second regardless, in case a change kept them.
//!
//! If the file becomes unreadable or holds no valid token, the token
//! already in force stays (a warning is logged): a half-finished rotation
//! must not lock the operator out, and removing the file is not a way to
//! open the API.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use thiserror::Error;
use tracing::{info, warn};

/// Shortest token accepted: below this a token can be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Largest token file read: it holds one token, not a document.
pub const MAX_TOKEN_BYTES: usize = 4096;
/// A token file is re-read at least this often, changed or not.
const RECHECK: Duration = Duration::from_secs(1);

/// Why a token file cannot be used.
#[derive(Debug, Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("cannot read the admin token file {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The file holds nothing but white space.
    #[error("the admin token file {path} is empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The token is too short to be secret.
    #[error(
        "the admin token in {path} is {len} bytes; a token has at least {MIN_TOKEN_BYTES} \
         (make one with: openssl rand -hex 32)"
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its length, white space trimmed.
        len: usize,
    },
    /// The file is larger than any token.
    #[error(
        "the admin token file {path} is larger than {MAX_TOKEN_BYTES} bytes; it holds one token"
    )]
    TooLong {
        /// The file.
        path: PathBuf,
    },
    /// A byte no HTTP header can carry, or a space inside the token.
    #[error(
        "the admin token in {path} has a byte other than printable ASCII (it travels in an \
         HTTP header: no spaces or control characters inside it)"
    )]
    NotPrintable {
        /// The file.
        path: PathBuf,
    },
}

/// The token in a file's bytes: white space around it is dropped (a
/// Secret made with `echo` ends with a newline); what is left must be
/// [`MIN_TOKEN_BYTES`] or more of printable ASCII.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, TokenError> {
    let token = bytes.trim_ascii();
    let path = path.to_path_buf();
    if token.is_empty() {
        return Err(TokenError::Empty { path });
    }
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::NotPrintable { path });
    }
    if token.len() < MIN_TOKEN_BYTES {
        return Err(TokenError::TooShort {
            path,
            len: token.len(),
        });
    }
    Ok(token.to_vec())
}

/// Reads and parses a token file, reading no more than [`MAX_TOKEN_BYTES`].
pub fn read(path: &Path) -> Result<Vec<u8>, TokenError> {
    let read_error = |cause| TokenError::Read {
        path: path.to_path_buf(),
        cause,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong {
            path: path.to_path_buf(),
        });
    }
    parse(path, &bytes)
}

/// Whether `a` and `b` are the same bytes, in a time that depends on their
/// lengths only: where the first difference is must not show in how long
/// a refusal takes.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// What `stat` says of a file through its symlinks: it differs when the
/// file was replaced or written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
    })
}

/// Where the admin token is kept and the token in force.
#[derive(Debug)]
pub struct AdminToken {
    path: PathBuf,
    /// The operator's file (re-read when it changes), or one tlcd wrote.
    configured: bool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    token: Vec<u8>,
    stamp: Option<Stamp>,
    checked: Instant,
    /// The last reason the file could not be used, logged once.
    last_error: Option<String>,
}

impl AdminToken {
    /// The token in the operator's `path`, read now (an error here stops
    /// tlcd at start) and again whenever the file changes.
    pub fn from_file(path: &Path) -> Result<AdminToken, TokenError> {
        let stamp = stamp(path);
        let token = read(path)?;
        Ok(AdminToken {
            path: path.to_path_buf(),
            configured: true,
            state: Mutex::new(State {
                token,
                stamp,
                checked: Instant::now(),
                last_error: None,
            }),
        })
    }

    /// A token tlcd made itself and wrote to `path`; fixed until tlcd stops.
    pub fn generated(path: &Path, token: Vec<u8>) -> AdminToken {
        AdminToken {
            path: path.to_path_buf(),
            configured: false,
            state: Mutex::new(State {
                token,
                stamp: None,
                checked: Instant::now(),
                last_error: None,
            }),
        }
    }

    /// The file the token is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the token comes from `admin.token_file` (else tlcd made it).
    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// Whether `presented` is the token in force, re-reading a configured
    /// file first if it changed.
    pub fn verify(&self, presented: &[u8]) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.configured {
            self.refresh(&mut state);
        }
        same(presented, &state.token)
    }

    fn refresh(&self, state: &mut State) {
        let now = stamp(&self.path);
        if now == state.stamp && state.checked.elapsed() < RECHECK {
            return;
        }
        state.stamp = now;
        state.checked = Instant::now();
        match read(&self.path) {
            Ok(token) => {
                if !same(&token, &state.token) {
                    info!(file = %self.path.display(), "admin token file changed: the new token is in force");
                    state.token = token;
                }
                state.last_error = None;
            }
            Err(err) => {
                let message = err.to_string();
                if state.last_error.as_ref() != Some(&message) {
                    warn!(error = %message, "the admin token stays the one read before");
                    state.last_error = Some(message);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_trimmed_and_checked() {
        let p = Path::new("/t");
        assert_eq!(
            parse(p, b"  0123456789abcdef\n").unwrap(),
            b"0123456789abcdef"
        );
        assert!(matches!(parse(p, b" \n"), Err(TokenError::Empty { .. })));
        let err = parse(p, b"0123456789abcde\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the admin token in /t is 15 bytes; a token has at least 16 (make one with: openssl rand -hex 32)"
        );
        assert!(matches!(
            parse(p, b"0123456789 abcdef"),
            Err(TokenError::NotPrintable { .. })
        ));
        assert!(matches!(
            parse(p, "0123456789abcdéf".as_bytes()),
            Err(TokenError::NotPrintable { .. })
        ));
    }

    #[test]
    fn same_compares_whole_tokens() {
        assert!(same(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same(b"0123456789abcdef", b"0123456789abcdeF"));
        assert!(!same(b"0123456789abcdef", b"0123456789abcde"));
        assert!(!same(b"0123456789abcdef", b"0123456789abcdef0"));
        assert!(!same(b"", b"0123456789abcdef"));
    }

    #[test]
    fn a_configured_file_is_reread_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first-token-0123456789\n").unwrap();
        let token = AdminToken::from_file(&path).unwrap();
        assert!(token.verify(b"first-token-0123456789"));
        // Rotation as Kubernetes does it: a new file renamed over the old.
        let next = dir.path().join("token.new");
        std::fs::write(&next, "second-token-0123456789").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(token.verify(b"second-token-0123456789"));
        assert!(!token.verify(b"first-token-0123456789"));
        // A broken file keeps the token in force.
        std::fs::write(&path, "short").unwrap();
        assert!(token.verify(b"second-token-0123456789"));
        std::fs::remove_file(&path).unwrap();
        assert!(token.verify(b"second-token-0123456789"));
        let err = AdminToken::from_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "cannot read the admin token file {}: ",
                path.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "x".repeat(MAX_TOKEN_BYTES + 1)).unwrap();
        assert!(matches!(read(&path), Err(TokenError::TooLong { .. })));
        std::fs::write(&path, "x".repeat(MAX_TOKEN_BYTES)).unwrap();
        assert_eq!(read(&path).unwrap().len(), MAX_TOKEN_BYTES);
    }
}
