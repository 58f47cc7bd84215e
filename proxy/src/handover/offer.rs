//! The running tlcd's side: [`Offer`] binds the hand-over socket and, per
//! successor, sends the listeners and waits for its "ready".

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use tokio::io::BufReader;
use tokio::net::UnixListener;

use super::protocol::{Hello, Manifest, ManifestEntry, Purpose, Ready, MAX_LISTENERS};
use super::{netns, wire, HandoverError, IO_TIMEOUT};
use tlc_core::runtime_dir;

/// One listener the running tlcd hands over.
#[derive(Debug, Clone, Copy)]
pub struct Offered<'a> {
    /// What it serves.
    pub purpose: Purpose,
    /// The listener; it stays the caller's, the successor gets a duplicate.
    pub listener: &'a TcpListener,
}

/// The successor that took the listeners, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOver {
    /// Its process id, as it says in its hello.
    pub pid: u32,
    /// Its tlcd version, as it says in its hello.
    pub tlcd: String,
    /// How many listeners it took.
    pub listeners: usize,
}

/// The hand-over socket of a running tlcd. Removed when dropped, if the
/// file is still this socket.
#[derive(Debug)]
pub struct Offer {
    listener: StdUnixListener,
    path: PathBuf,
    /// Device and inode of the socket file, to tell ours from a newer one.
    file: (u64, u64),
}

impl Offer {
    /// Binds the hand-over socket at `path`, mode 0600. A missing parent
    /// directory, or tlcd's runtime directory, is made (or checked) private
    /// to tlcd's user, mode 0700. A socket file nobody accepts on (left by
    /// a tlcd that died) is replaced; one a live tlcd offers at is
    /// [`HandoverError::InUse`]. Needs no Tokio runtime.
    pub fn bind(path: &Path) -> Result<Offer, HandoverError> {
        let bind_error = |cause| HandoverError::Bind {
            path: path.to_path_buf(),
            cause,
        };
        prepare_directory(path)?;
        remove_stale(path)?;
        let listener = match StdUnixListener::bind(path) {
            Ok(listener) => listener,
            // Another tlcd bound it since remove_stale looked.
            Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(HandoverError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(err) => return Err(bind_error(err)),
        };
        // Before this the socket had the umask's mode for a moment; a
        // stranger who connected then is refused by its uid.
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let meta = fs::symlink_metadata(path).map_err(bind_error)?;
        Ok(Offer {
            listener,
            path: path.to_path_buf(),
            file: (meta.dev(), meta.ino()),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for a successor, sends it the manifest and a duplicate of
    /// every listener's descriptor, and waits up to `ready_timeout` for its
    /// "ready". `Ok` only once the successor said it accepts on them all:
    /// then stop accepting and drain. The socket file is gone by then (so
    /// that the successor can offer at the same path): nothing reaches
    /// this offer any more. On `Err` (a stranger, a bad hello, a
    /// successor that failed, left or hung) keep serving and call this
    /// again for the next successor. Cancel-safe while it waits for one.
    pub async fn hand_over(
        &self,
        listeners: &[Offered<'_>],
        ready_timeout: Duration,
    ) -> Result<HandedOver, HandoverError> {
        let manifest = manifest_of(listeners)?;
        let accept_error = |cause| HandoverError::Io {
            what: "accepting a successor",
            cause,
        };
        // A duplicate per call, registered with this call's runtime.
        let std_listener = self.listener.try_clone().map_err(accept_error)?;
        let listener = UnixListener::from_std(std_listener).map_err(accept_error)?;
        let (stream, _) = listener.accept().await.map_err(accept_error)?;
        drop(listener);
        wire::check_same_user(&stream)?;
        let mut stream = BufReader::new(stream);
        if let Err(err) = netns::check_same(stream.get_ref()) {
            // The successor learns why instead of a closed connection.
            let refusal = Manifest::refusal_line(&err.to_string());
            let _ = wire::write_line(stream.get_mut(), &refusal, "refusing").await;
            return Err(err);
        }

        let line =
            wire::bounded(IO_TIMEOUT, "hello", wire::read_line(&mut stream, "hello")).await?;
        let hello = match Hello::parse(&line) {
            Ok(hello) => hello,
            Err(err) => {
                // Best effort: a tlcd of another version learns why.
                let refusal = Manifest::refusal_line(&err.to_string());
                let _ = wire::write_line(stream.get_mut(), &refusal, "refusing").await;
                return Err(err);
            }
        };

        let fds: Vec<BorrowedFd<'_>> = listeners.iter().map(|o| o.listener.as_fd()).collect();
        wire::bounded(
            IO_TIMEOUT,
            "room for the manifest",
            wire::send_with_fds(stream.get_ref(), &manifest.to_line(), &fds),
        )
        .await?;

        let line = wire::bounded(
            ready_timeout,
            "ready line from the successor",
            wire::read_line(&mut stream, "ready line"),
        )
        .await?;
        match Ready::parse(&line)? {
            Ready::Serving => {
                // The successor binds its own offer here once this
                // connection closes (see `Inherited::ready`).
                self.remove_file();
                Ok(HandedOver {
                    pid: hello.pid,
                    tlcd: hello.tlcd,
                    listeners: listeners.len(),
                })
            }
            Ready::Failed(why) => Err(HandoverError::NotReady(why)),
        }
    }
}

impl Offer {
    /// Removes the socket file if it is still this offer's.
    fn remove_file(&self) {
        // A successor may have bound its own offer at the path meanwhile.
        let ours = fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.file);
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.remove_file();
    }
}

/// The manifest of `listeners`, from their own `local_addr()`.
fn manifest_of(listeners: &[Offered<'_>]) -> Result<Manifest, HandoverError> {
    if listeners.len() > MAX_LISTENERS {
        return Err(HandoverError::Offer(format!(
            "{} listeners, at most {MAX_LISTENERS}",
            listeners.len()
        )));
    }
    let entries = listeners
        .iter()
        .map(|offered| {
            let addr: SocketAddr = offered.listener.local_addr().map_err(|err| {
                HandoverError::Offer(format!(
                    "a {} listener has no address: {err}",
                    offered.purpose
                ))
            })?;
            Ok(ManifestEntry {
                purpose: offered.purpose,
                addr,
            })
        })
        .collect::<Result<Vec<_>, HandoverError>>()?;
    let manifest = Manifest { listeners: entries };
    // What the successor will check, checked here first (no address twice).
    Manifest::parse(&manifest.to_line())
}

/// Makes the socket's directory private when it is missing or is tlcd's
/// runtime directory; a directory the operator chose is left alone.
fn prepare_directory(path: &Path) -> Result<(), HandoverError> {
    let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) else {
        return Ok(());
    };
    if !dir.exists() || dir == runtime_dir::directory() {
        runtime_dir::ensure_private(dir)?;
    }
    Ok(())
}

/// Removes a socket file at `path` that nobody accepts on.
fn remove_stale(path: &Path) -> Result<(), HandoverError> {
    let bind_error = |cause| HandoverError::Bind {
        path: path.to_path_buf(),
        cause,
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(bind_error(err)),
    };
    if !meta.file_type().is_socket() {
        return Err(HandoverError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    // Non-blocking, so that a live tlcd with a full backlog is "in use"
    // (EAGAIN) rather than a wait.
    let probe = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|err| bind_error(err.into()))?;
    let addr = SocketAddrUnix::new(path).map_err(|err| bind_error(err.into()))?;
    match rustix::net::connect(&probe, &addr) {
        Ok(()) | Err(Errno::AGAIN) | Err(Errno::INPROGRESS) => Err(HandoverError::InUse {
            path: path.to_path_buf(),
        }),
        Err(Errno::CONNREFUSED) => match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(bind_error(err)),
        },
        Err(err) => Err(bind_error(err.into())),
    }
}
