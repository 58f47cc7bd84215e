//! Processes and ports of tests that run real programs (tlcd, Prometheus).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A loopback address nothing listened on a moment ago.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// A child process killed (and reaped) when the test ends, passing or not.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (a tlcd) with its stdout dropped and its stderr shown
/// with the test's, killed when the test ends: how tests that run a real
/// tlcd start it.
pub fn spawn_tlcd(command: &mut Command) -> KillOnDrop {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tlcd");
    KillOnDrop(child)
}
