//! The address a redirected connection was originally sent to.
//!
//! iptables `REDIRECT` rewrites the destination of a connection to the
//! sidecar's listener; netfilter's connection tracking remembers the
//! original, which `getsockopt(SO_ORIGINAL_DST)` returns.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use tokio::net::TcpStream;

/// `SO_ORIGINAL_DST` from `linux/netfilter_ipv4.h`.
const SO_ORIGINAL_DST: libc::c_int = 80;
/// `IP6T_SO_ORIGINAL_DST` from `linux/netfilter_ipv6/ip6_tables.h`.
const IP6T_SO_ORIGINAL_DST: libc::c_int = 80;

/// The original destination of `stream`, or the OS error (`ENOENT` when
/// the connection was not redirected).
pub fn original_dst(stream: &TcpStream) -> std::io::Result<SocketAddr> {
    let local = stream.local_addr()?;
    let fd = stream.as_raw_fd();
    // A dual-stack socket accepting an IPv4 client reports a mapped IPv6
    // local address, but conntrack keeps the entry under IPv4.
    let is_v4 = match local {
        SocketAddr::V4(_) => true,
        SocketAddr::V6(v6) => v6.ip().to_ipv4_mapped().is_some(),
    };
    if is_v4 {
        original_dst_v4(fd)
    } else {
        original_dst_v6(fd)
    }
}

fn original_dst_v4(fd: libc::c_int) -> std::io::Result<SocketAddr> {
    let mut addr: libc::sockaddr_in = unsafe_zeroed_sockaddr_in();
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket owned by the caller's TcpStream for the
    // duration of this call; `addr` and `len` point to live, writable memory
    // of the size `len` says, which getsockopt fills at most.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
    Ok(SocketAddr::V4(SocketAddrV4::new(
        ip,
        u16::from_be(addr.sin_port),
    )))
}

fn original_dst_v6(fd: libc::c_int) -> std::io::Result<SocketAddr> {
    // SAFETY: sockaddr_in6 is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: as in `original_dst_v4`, with a sockaddr_in6 buffer.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_IPV6,
            IP6T_SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in6).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ip = Ipv6Addr::from(addr.sin6_addr.s6_addr);
    Ok(SocketAddr::V6(SocketAddrV6::new(
        ip,
        u16::from_be(addr.sin6_port),
        addr.sin6_flowinfo,
        addr.sin6_scope_id,
    )))
}

fn unsafe_zeroed_sockaddr_in() -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a REDIRECT rule conntrack has no original destination for
    /// the connection: the call must fail cleanly (ENOENT), not invent one.
    /// The redirected case is tested end to end in network namespaces.
    #[tokio::test]
    async fn unredirected_connection_has_no_original_destination() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        for stream in [&client, &server] {
            match original_dst(stream) {
                Err(err) => assert!(
                    matches!(
                        err.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ENOPROTOOPT)
                    ),
                    "{err}"
                ),
                // Some kernels with conntrack loaded return the plain
                // destination for a connection that was not rewritten.
                Ok(dst) => assert_eq!(dst, addr),
            }
        }
    }
}
