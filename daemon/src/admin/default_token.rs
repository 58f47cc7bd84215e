//! The admin token tlcd makes when `admin.token_file` is not set: 32
//! random bytes in hex, written where `tlcctl` on the same host looks for
//! it, so the local workflow (`tlcctl status` next to a tlcd) needs no
//! flag while other users and browser pages have no way to the token.
//!
//! The file is `admin-PORT.token` (PORT: the admin API's port) in
//! `$XDG_RUNTIME_DIR/tlcd/` when `XDG_RUNTIME_DIR` is a directory of
//! tlcd's user, else in `$TMPDIR/tlcd-UID/` (`/tmp` without `TMPDIR`):
//! `tlc_admin_api::default_token`, where tlcctl looks too.
//! The directory is made mode 0700 and must belong to tlcd's user and not
//! be a symlink (in a shared `/tmp` another user could have made it
//! first); the file is mode 0600, written under a temporary name and
//! renamed into place.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use tlc_core::runtime_dir::{self, PrivateDirError};

/// Kept here too: tlcd and its tests found them in this module first.
pub use tlc_core::runtime_dir::{directory, euid};

/// Random bytes in a token tlcd makes.
const TOKEN_BYTES: usize = 32;

/// Why tlcd could not make or write its own token.
#[derive(Debug, Error)]
pub enum DefaultTokenError {
    /// No randomness from the OS.
    #[error("no random bytes for the admin token: {0}")]
    Random(String),
    /// The directory cannot be made or inspected.
    #[error("cannot make the directory {dir} for the admin token: {cause}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The directory exists but is not tlcd's own.
    #[error("{dir} is not a private directory of tlcd's user: {why}; remove it")]
    NotPrivate {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The token cannot be written.
    #[error("cannot write the admin token to {path}: {cause}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
}

/// The token file of the admin API on `port`.
pub fn path(port: u16) -> PathBuf {
    tlc_admin_api::default_token::path(port)
}

/// Makes a token for the admin API on `port` and writes it to [`path`];
/// returns the file and the token.
pub fn create(port: u16) -> Result<(PathBuf, Vec<u8>), DefaultTokenError> {
    let token = random_hex()?;
    let dir = directory();
    private_directory(&dir)?;
    let path = dir.join(tlc_admin_api::default_token::file_name(port));
    write_private(&path, &token)?;
    Ok((path, token))
}

/// Removes the token file at shutdown, if it still holds `token` (a newer
/// tlcd on the same port may have replaced it).
pub fn remove(path: &Path, token: &[u8]) {
    if fs::read(path).is_ok_and(|bytes| bytes.trim_ascii() == token) {
        let _ = fs::remove_file(path);
    }
}

fn random_hex() -> Result<Vec<u8>, DefaultTokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| DefaultTokenError::Random(e.to_string()))?;
    Ok(bytes
        .iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect())
}

/// Makes `dir` (mode 0700) or checks that the one there is a real
/// directory of this user ([`runtime_dir::ensure_private`]).
fn private_directory(dir: &Path) -> Result<(), DefaultTokenError> {
    runtime_dir::ensure_private(dir).map_err(|err| match err {
        PrivateDirError::Make { dir, cause } => DefaultTokenError::Directory { dir, cause },
        PrivateDirError::NotPrivate { dir, why } => DefaultTokenError::NotPrivate { dir, why },
    })
}

/// Writes `token` to `path`, mode 0600, whole or not at all.
fn write_private(path: &Path, token: &[u8]) -> Result<(), DefaultTokenError> {
    let write_error = |cause| DefaultTokenError::Write {
        path: path.to_path_buf(),
        cause,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    // Left by a tlcd that died with the same pid: ours to remove.
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(write_error)?;
    let written = file
        .write_all(token)
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&tmp);
        return Err(write_error(err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let a = random_hex().unwrap();
        let b = random_hex().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.iter().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_file_is_private_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("tlcd-test");
        private_directory(&private).unwrap();
        let meta = fs::symlink_metadata(&private).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        let path = private.join("admin-1.token");
        write_private(&path, b"0123456789abcdef0123").unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        write_private(&path, b"fedcba9876543210fedc").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"fedcba9876543210fedc\n");
        assert_eq!(fs::read_dir(&private).unwrap().count(), 1);
        remove(&path, b"not the token in the file");
        assert!(path.exists());
        remove(&path, b"fedcba9876543210fedc");
        assert!(!path.exists());

        // A wider mode is narrowed.
        fs::set_permissions(&private, fs::Permissions::from_mode(0o755)).unwrap();
        private_directory(&private).unwrap();
        assert_eq!(fs::metadata(&private).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_symlink_is_not_a_private_directory() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let link = dir.path().join("tlcd-link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let err = private_directory(&link).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        let file = dir.path().join("a-file");
        fs::write(&file, "").unwrap();
        let err = private_directory(&file).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
    }
}
