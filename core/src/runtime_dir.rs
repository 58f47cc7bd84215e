//! The per-user directory tlcd keeps its small runtime files in: the admin
//! token it makes (`tlc_admin_api::default_token`, read by `tlcctl` too)
//! and the socket it offers its listeners at for a successor to take over
//! (`tlc_proxy::handover`).
//!
//! It is `$XDG_RUNTIME_DIR/tlcd/` when `XDG_RUNTIME_DIR` is an absolute
//! path to a directory of tlcd's user, else `$TMPDIR/tlcd-UID/` (`/tmp`
//! without `TMPDIR`). [`ensure_private`] makes it mode 0700 and refuses one
//! that is not tlcd's own or is a symlink: in a shared `/tmp` another user
//! could have made it first. A reader (tlcctl) that may not see tlcd's
//! environment looks in each of the [`candidates`].

use std::fs::{self, DirBuilder};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a directory cannot hold tlcd's private files.
#[derive(Debug, Error)]
pub enum PrivateDirError {
    /// The directory cannot be made or inspected.
    #[error("cannot make the directory {dir}: {cause}")]
    Make {
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
}

/// This process's effective user id, which owns the files tlcd makes and
/// names its directory in `/tmp`.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `$XDG_RUNTIME_DIR`, when it is an absolute path.
fn xdg_runtime_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
}

/// `$TMPDIR/tlcd-UID` (`/tmp` without `TMPDIR`).
fn temp_directory(uid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("tlcd-{uid}"))
}

/// The directory tlcd keeps its runtime files in (see the module comment).
pub fn directory() -> PathBuf {
    let uid = euid();
    let runtime = xdg_runtime_dir()
        .filter(|dir| fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid));
    match runtime {
        Some(dir) => dir.join("tlcd"),
        None => temp_directory(uid),
    }
}

/// Every directory [`directory`] may be, in the order it prefers them:
/// `$XDG_RUNTIME_DIR/tlcd/` when `XDG_RUNTIME_DIR` is an absolute path
/// (whoever owns it), then `$TMPDIR/tlcd-UID/`.
pub fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = xdg_runtime_dir()
        .map(|dir| dir.join("tlcd"))
        .into_iter()
        .collect();
    dirs.push(temp_directory(euid()));
    dirs
}

/// Makes `dir` (mode 0700) or checks that the one there is a real
/// directory of this user; narrows its mode to 0700 if it was wider.
pub fn ensure_private(dir: &Path) -> Result<(), PrivateDirError> {
    let io_error = |cause| PrivateDirError::Make {
        dir: dir.to_path_buf(),
        cause,
    };
    let not_private = |why: String| PrivateDirError::NotPrivate {
        dir: dir.to_path_buf(),
        why,
    };
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(io_error(err)),
    }
    let meta = fs::symlink_metadata(dir).map_err(io_error)?;
    if meta.file_type().is_symlink() {
        return Err(not_private("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(not_private("it is not a directory".into()));
    }
    if meta.uid() != euid() {
        return Err(not_private(format!(
            "it belongs to uid {}, tlcd runs as uid {}",
            meta.uid(),
            euid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_one_of_the_candidates() {
        assert!(candidates().contains(&directory()));
        assert_eq!(candidates().last(), Some(&temp_directory(euid())));
    }

    #[test]
    fn a_private_directory_is_made_narrowed_and_checked() -> Result<(), Box<dyn std::error::Error>>
    {
        let scratch = tempfile::tempdir()?;
        let dir = scratch.path().join("tlcd-test");
        ensure_private(&dir)?;
        assert_eq!(fs::metadata(&dir)?.mode() & 0o777, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        ensure_private(&dir)?;
        assert_eq!(fs::metadata(&dir)?.mode() & 0o777, 0o700);

        let link = scratch.path().join("link");
        std::os::unix::fs::symlink(&dir, &link)?;
        let err = ensure_private(&link).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("symbolic link")),
            "{err:?}"
        );
        Ok(())
    }
}
