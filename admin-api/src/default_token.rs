//! Where tlcd writes the admin token it makes when `admin.token_file` is
//! not set, and where tlcctl, run by the same user, finds it:
//! `admin-PORT.token` (PORT: the admin API's port) in the
//! [`runtime_dir`](crate::runtime_dir). tlcd writes it mode 0600 in a
//! directory of mode 0700.

use std::path::PathBuf;

use crate::runtime_dir;

/// The token file's name for the admin API on `port`.
pub fn file_name(port: u16) -> String {
    format!("admin-{port}.token")
}

/// The file tlcd writes its token for the admin API on `port` to.
pub fn path(port: u16) -> PathBuf {
    runtime_dir::directory().join(file_name(port))
}

/// Every file tlcd may have written its token for `port` to, in the order
/// to look ([`runtime_dir::candidates`]).
pub fn candidates(port: u16) -> Vec<PathBuf> {
    runtime_dir::candidates()
        .into_iter()
        .map(|dir| dir.join(file_name(port)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_named_after_the_port() {
        assert_eq!(file_name(17000), "admin-17000.token");
        assert!(path(17000).ends_with("admin-17000.token"));
        assert!(candidates(17000).contains(&path(17000)));
    }
}
