//! Which network namespace the two ends of a hand-over are in.
//!
//! A listening socket belongs to the network namespace it was bound in.
//! Two tlcds in different namespaces that share a file system (pods as
//! network namespaces on one host, `ip netns exec`, a `/tmp` mounted into
//! several containers) see each other's hand-over socket; a listener taken
//! across would make one job's sidecar serve another job's connections,
//! and the other job's tasks then talk to a stranger (a parameter task
//! reading another job's model). So the default socket path carries the
//! namespace, and both ends refuse a peer they can see is elsewhere.
//!
//! A namespace is named by its `nsfs` inode (`/proc/PID/ns/net`, the
//! number in `net:[4026531840]`). A peer in another PID namespace, or one
//! whose `/proc` entry this process may not read, cannot be checked; the
//! other end usually can, and the default path already differs.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tokio::net::UnixStream;

use super::HandoverError;

/// The network namespace of the process whose `/proc` entry is `proc`:
/// (device, inode) of its `ns/net`, `None` when it cannot be read.
fn namespace_at(proc: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(proc.join("ns/net")).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The inode naming this process's network namespace, if `/proc` shows it.
pub(super) fn ours() -> Option<u64> {
    namespace_at(Path::new("/proc/self")).map(|(_, ino)| ino)
}

/// Refuses a peer that `/proc` shows in another network namespace than
/// this process: `proc_root` is `/proc` outside the tests.
pub(super) fn check_same_at(proc_root: &Path, peer_pid: Option<i32>) -> Result<(), HandoverError> {
    let Some(pid) = peer_pid.filter(|pid| *pid > 0) else {
        return Ok(());
    };
    let ours = namespace_at(&proc_root.join("self"));
    let theirs = namespace_at(&proc_root.join(pid.to_string()));
    match (ours, theirs) {
        (Some(ours), Some(theirs)) if ours != theirs => Err(HandoverError::OtherNetwork {
            pid,
            theirs: theirs.1,
            ours: ours.1,
        }),
        _ => Ok(()),
    }
}

/// Refuses the peer on `stream` when it is in another network namespace.
pub(super) fn check_same(stream: &UnixStream) -> Result<(), HandoverError> {
    let pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
    check_same_at(Path::new("/proc"), pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/proc` whose `self` and `PID` have `ns/net` files: two
    /// names for one file share a namespace, two files do not.
    fn fake_proc(same: bool) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for dir in ["self/ns", "42/ns"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("self/ns/net"), b"").unwrap();
        if same {
            std::fs::hard_link(
                root.path().join("self/ns/net"),
                root.path().join("42/ns/net"),
            )
            .unwrap();
        } else {
            std::fs::write(root.path().join("42/ns/net"), b"").unwrap();
        }
        root
    }

    #[test]
    fn a_peer_in_another_namespace_is_refused() {
        let other = fake_proc(false);
        let err = check_same_at(other.path(), Some(42)).unwrap_err();
        assert!(
            matches!(err, HandoverError::OtherNetwork { pid: 42, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("another network namespace"),
            "{err}"
        );
        let same = fake_proc(true);
        check_same_at(same.path(), Some(42)).unwrap();
    }

    #[test]
    fn a_peer_that_cannot_be_seen_is_not_judged() {
        let root = fake_proc(false);
        check_same_at(root.path(), None).unwrap();
        check_same_at(root.path(), Some(0)).unwrap();
        check_same_at(root.path(), Some(7)).unwrap();
    }

    #[test]
    fn this_process_is_in_its_own_namespace() {
        if ours().is_some() {
            check_same_at(Path::new("/proc"), Some(std::process::id() as i32)).unwrap();
        }
    }
}
