//! Lines over the hand-over socket: plain ones, and the one that carries
//! descriptors (SCM_RIGHTS) through rustix's safe `sendmsg`/`recvmsg` on
//! tokio's non-blocking Unix stream; the peer check and the timeouts
//! both sides use.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::UnixStream;

use super::protocol::{MAX_LINE, MAX_LISTENERS};
use super::{HandoverError, IO_TIMEOUT};

/// Bytes asked of one `recvmsg`.
const CHUNK: usize = 4096;

/// Reads one line (newline included) of at most [`MAX_LINE`] bytes.
/// Whatever follows the newline stays in `reader`.
pub(super) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    what: &'static str,
) -> Result<Vec<u8>, HandoverError> {
    let mut line = Vec::new();
    loop {
        let buffered = reader.fill_buf().await.map_err(|cause| HandoverError::Io {
            what: "reading from the peer",
            cause,
        })?;
        if buffered.is_empty() {
            return Err(HandoverError::Closed { what });
        }
        let (take, done) = match buffered.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffered.len(), false),
        };
        if line.len() + take > MAX_LINE {
            return Err(HandoverError::TooLong {
                what,
                limit: MAX_LINE,
            });
        }
        line.extend_from_slice(&buffered[..take]);
        reader.consume(take);
        if done {
            return Ok(line);
        }
    }
}

/// Writes `line` whole within [`IO_TIMEOUT`].
pub(super) async fn write_line<W: AsyncWrite + Unpin>(
    writer: &mut W,
    line: &[u8],
    what: &'static str,
) -> Result<(), HandoverError> {
    match tokio::time::timeout(IO_TIMEOUT, writer.write_all(line)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(cause)) => Err(HandoverError::Io { what, cause }),
        Err(_) => Err(HandoverError::Timeout {
            what,
            limit: IO_TIMEOUT,
        }),
    }
}

/// Sends `line` with `fds` attached to its first bytes (one `sendmsg`;
/// should the socket take only part of the line, the rest follows
/// without descriptors). Unbounded in time: the caller bounds it.
pub(super) async fn send_with_fds(
    stream: &UnixStream,
    line: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), HandoverError> {
    let io = |cause| HandoverError::Io {
        what: "sending the manifest and descriptors",
        cause,
    };
    let mut sent = 0;
    while sent < line.len() {
        stream.writable().await.map_err(io)?;
        let attach = if sent == 0 { fds } else { &[] };
        let result = stream.try_io(Interest::WRITABLE, || {
            let mut space =
                vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(attach.len()))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !attach.is_empty() && !control.push(SendAncillaryMessage::ScmRights(attach)) {
                return Err(std::io::Error::other(
                    "the descriptors do not fit the control buffer",
                ));
            }
            let iov = [IoSlice::new(&line[sent..])];
            Ok(sendmsg(
                stream.as_fd(),
                &iov,
                &mut control,
                SendFlags::NOSIGNAL,
            )?)
        });
        match result {
            Ok(n) => sent += n,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(io(err)),
        }
    }
    Ok(())
}

/// Receives one line and every descriptor that comes with it, over as many
/// `recvmsg` calls as the line takes. More than [`MAX_LISTENERS`]
/// descriptors, bytes after the newline, or a line over [`MAX_LINE`] are
/// errors; descriptors received are closed on any error. Unbounded in
/// time: the caller bounds it.
pub(super) async fn recv_with_fds(
    stream: &UnixStream,
) -> Result<(Vec<u8>, Vec<OwnedFd>), HandoverError> {
    let io = |cause| HandoverError::Io {
        what: "receiving the manifest and descriptors",
        cause,
    };
    let mut line = Vec::new();
    let mut fds = Vec::new();
    loop {
        stream.readable().await.map_err(io)?;
        // One more descriptor than allowed fits, so that an excess shows
        // here rather than only as a truncated control message.
        let mut space =
            vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_LISTENERS + 1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut chunk = [0u8; CHUNK];
        // Never more than one byte past the limit, enough to see it passed.
        let want = CHUNK.min(MAX_LINE + 1 - line.len());
        let result = stream.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(&mut chunk[..want])];
            Ok(recvmsg(
                stream.as_fd(),
                &mut iov,
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )?)
        });
        let mut excess = false;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                for fd in received {
                    if fds.len() < MAX_LISTENERS {
                        fds.push(fd);
                    } else {
                        // Dropped here: closed.
                        excess = true;
                    }
                }
            }
        }
        let received = match result {
            Ok(received) => received,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(io(err)),
        };
        // CTRUNC: the kernel had more descriptors than the buffer holds,
        // and closed those.
        if excess || received.flags.contains(ReturnFlags::CTRUNC) {
            return Err(HandoverError::TooManyDescriptors);
        }
        if received.bytes == 0 {
            return Err(HandoverError::Closed { what: "manifest" });
        }
        let data = &chunk[..received.bytes.min(want)];
        line.extend_from_slice(data);
        // Earlier chunks held no newline: only this one can.
        if let Some(at) = data.iter().position(|&b| b == b'\n') {
            if at + 1 != data.len() {
                return Err(HandoverError::Malformed {
                    what: "manifest",
                    reason: "bytes follow it before the successor's ready".into(),
                });
            }
            return Ok((line, fds));
        }
        if line.len() > MAX_LINE {
            return Err(HandoverError::TooLong {
                what: "manifest",
                limit: MAX_LINE,
            });
        }
    }
}

/// Refuses a peer of another user: listeners go only to ourselves.
pub(super) fn check_same_user(stream: &UnixStream) -> Result<(), HandoverError> {
    let cred = stream.peer_cred().map_err(|cause| HandoverError::Io {
        what: "asking the peer's credentials",
        cause,
    })?;
    let ours = tlc_core::runtime_dir::euid();
    if cred.uid() != ours {
        return Err(HandoverError::OtherUser {
            uid: cred.uid(),
            ours,
        });
    }
    Ok(())
}

/// Runs `step` for at most `limit`; its timeout says what did not come.
pub(super) async fn bounded<T>(
    limit: Duration,
    what: &'static str,
    step: impl std::future::Future<Output = Result<T, HandoverError>>,
) -> Result<T, HandoverError> {
    tokio::time::timeout(limit, step)
        .await
        .map_err(|_| HandoverError::Timeout { what, limit })?
}
