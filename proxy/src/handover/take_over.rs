//! The successor's side: [`take_over`] receives the running tlcd's
//! listeners, checks each, and [`Inherited::ready`] tells it to stop.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use rustix::net::{sockopt, AddressFamily, SocketType};
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

use super::protocol::{Hello, Manifest, ManifestEntry, Purpose, Ready};
use super::{netns, wire, HandoverError, IO_TIMEOUT};

/// A listener received from the running tlcd, checked: a listening TCP
/// socket bound to `addr`, non-blocking (ready for
/// `tokio::net::TcpListener::from_std`).
#[derive(Debug)]
pub struct InheritedListener {
    /// What it serves.
    pub purpose: Purpose,
    /// The address it is bound to.
    pub addr: SocketAddr,
    /// The listener.
    pub listener: TcpListener,
}

/// What [`take_over`] received, and the connection to the running tlcd
/// that waits for [`Inherited::ready`]. Dropped without `ready`, the
/// running tlcd takes it as a failure and keeps serving.
#[derive(Debug)]
pub struct Inherited {
    /// The listeners not yet [`take`](Inherited::take)n, in the order
    /// they came. Those left when this drops are closed here; the running
    /// tlcd's copies close when it exits.
    pub listeners: Vec<InheritedListener>,
    /// The running tlcd's process id, from the socket's credentials.
    pub predecessor_pid: Option<i32>,
    stream: UnixStream,
}

impl Inherited {
    /// Takes the listener of `purpose` bound to `addr` out, if one was
    /// handed over.
    pub fn take(&mut self, purpose: Purpose, addr: SocketAddr) -> Option<TcpListener> {
        let at = self
            .listeners
            .iter()
            .position(|l| l.purpose == purpose && l.addr == addr)?;
        Some(self.listeners.remove(at).listener)
    }

    /// Tells the running tlcd that this one now accepts on every listener
    /// it took, and waits (up to [`IO_TIMEOUT`]) for it to close the
    /// connection: then it stops accepting and drains, and its socket file
    /// is gone, so this tlcd may bind its own [`Offer`](super::Offer) at
    /// the same path. An `Err` means the old one may not have heard (it
    /// waited too long, or died) and may still be accepting too, which is
    /// harmless: both serve.
    pub async fn ready(mut self) -> Result<(), HandoverError> {
        wire::write_line(&mut self.stream, &Ready::Serving.to_line(), "saying ready").await?;
        wire::bounded(IO_TIMEOUT, "goodbye from the running tlcd", async {
            let mut scratch = [0u8; 256];
            // Nothing is due after "ready" but the close; stray bytes are
            // read and ignored.
            loop {
                match self.stream.read(&mut scratch).await {
                    Ok(0) => return Ok(()),
                    Ok(_) => continue,
                    Err(cause) => {
                        return Err(HandoverError::Io {
                            what: "waiting for the running tlcd to let go",
                            cause,
                        })
                    }
                }
            }
        })
        .await
    }

    /// Tells the running tlcd that this one cannot serve (`why` goes to its
    /// log); it keeps serving.
    pub async fn fail(mut self, why: &str) -> Result<(), HandoverError> {
        let line = Ready::Failed(why.to_string()).to_line();
        wire::write_line(&mut self.stream, &line, "saying not ready").await
    }
}

/// Connects to the running tlcd offering at `path`, says hello and receives
/// its listeners, all within `timeout`. Each descriptor is checked against
/// the manifest; on any mismatch the running tlcd is told, keeps serving,
/// and this returns `Err` with every received descriptor closed.
pub async fn take_over(path: &Path, timeout: Duration) -> Result<Inherited, HandoverError> {
    wire::bounded(timeout, "hand-over from the running tlcd", exchange(path)).await
}

async fn exchange(path: &Path) -> Result<Inherited, HandoverError> {
    let mut stream = UnixStream::connect(path)
        .await
        .map_err(|cause| HandoverError::Connect {
            path: path.to_path_buf(),
            cause,
        })?;
    wire::check_same_user(&stream)?;
    netns::check_same(&stream)?;
    let predecessor_pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
    wire::write_line(
        &mut stream,
        &Hello::current().to_line(),
        "sending the hello",
    )
    .await?;
    let received = wire::recv_with_fds(&stream).await;
    match received.and_then(|(line, fds)| inherit(&line, fds)) {
        Ok(listeners) => Ok(Inherited {
            listeners,
            predecessor_pid,
            stream,
        }),
        // Nobody to tell.
        Err(err @ (HandoverError::Refused(_) | HandoverError::Closed { .. })) => Err(err),
        Err(err) => {
            // Best effort: the running tlcd logs why and keeps serving.
            let line = Ready::Failed(err.to_string()).to_line();
            let _ = wire::write_line(&mut stream, &line, "saying not ready").await;
            Err(err)
        }
    }
}

/// Pairs the manifest with the descriptors and checks each.
fn inherit(line: &[u8], fds: Vec<OwnedFd>) -> Result<Vec<InheritedListener>, HandoverError> {
    let manifest = Manifest::parse(line)?;
    if fds.len() != manifest.listeners.len() {
        return Err(HandoverError::Descriptors {
            listed: manifest.listeners.len(),
            received: fds.len(),
        });
    }
    manifest
        .listeners
        .iter()
        .zip(fds)
        .map(|(entry, fd)| check_listener(entry, fd))
        .collect()
}

/// Checks that `fd` is a listening TCP socket bound to `entry.addr` and
/// makes it non-blocking.
fn check_listener(entry: &ManifestEntry, fd: OwnedFd) -> Result<InheritedListener, HandoverError> {
    let unusable = |why: String| HandoverError::NotListening {
        purpose: entry.purpose,
        addr: entry.addr,
        why,
    };
    let socket_error = |err: rustix::io::Errno| unusable(format!("not a socket ({err})"));
    let domain = sockopt::socket_domain(&fd).map_err(socket_error)?;
    if domain != AddressFamily::INET && domain != AddressFamily::INET6 {
        return Err(unusable("not an IP socket".into()));
    }
    if sockopt::socket_type(&fd).map_err(socket_error)? != SocketType::STREAM {
        return Err(unusable("not a TCP socket".into()));
    }
    if !sockopt::socket_acceptconn(&fd).map_err(socket_error)? {
        return Err(unusable("the socket is not listening".into()));
    }
    let listener = TcpListener::from(fd);
    let bound = listener
        .local_addr()
        .map_err(|err| unusable(format!("it has no address ({err})")))?;
    if bound != entry.addr {
        return Err(unusable(format!("it is bound to {bound}")));
    }
    // The flag is the open file's, shared with the running tlcd's copy,
    // which tokio made non-blocking already.
    listener
        .set_nonblocking(true)
        .map_err(|err| unusable(format!("cannot make it non-blocking ({err})")))?;
    Ok(InheritedListener {
        purpose: entry.purpose,
        addr: entry.addr,
        listener,
    })
}
