//! A new tlcd takes the listening sockets over from the running one
//! (`--take-over`): connecting never fails during the hand-over, calls in
//! progress finish on the old process, later calls reach the new one, and
//! the old one exits.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use support::process::{free_addr, KillOnDrop};
use support::start_echo_server;

/// A tlcd routing `listen` to `upstream`, offering its listeners at
/// `socket` (or taking them over from there), logging to `log`; started by
/// `wrapper` (a program and its arguments, then tlcd's command line) if it
/// is not empty.
fn tlcd_under(
    wrapper: &[&str],
    listen: SocketAddr,
    upstream: SocketAddr,
    socket: &Path,
    log: &Path,
    take_over: bool,
) -> Child {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(env!("CARGO_BIN_EXE_tlcd"));
            command
        }
        None => Command::new(env!("CARGO_BIN_EXE_tlcd")),
    };
    command
        .arg("--route")
        .arg(format!("{listen}={upstream},outbound"))
        .args(["--admin-listen", "off", "--metrics-listen", "off"])
        .arg("--handover-socket")
        .arg(socket)
        .env("RUST_LOG", "info")
        .env(support::COMPRESSING_ENV.0, support::COMPRESSING_ENV.1)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    if take_over {
        command.arg("--take-over");
    }
    command.spawn().unwrap()
}

/// A gRPC-like client: one connection at a time; when the server closes it
/// (GOAWAY), the next call opens a new one, as gRPC does. Errors are
/// returned, not unwrapped: the test counts them.
struct Reconnecting {
    addr: SocketAddr,
    sender: Option<hyper::client::conn::http2::SendRequest<Full<Bytes>>>,
    connections: u32,
}

impl Reconnecting {
    /// A client of `addr` that has not connected yet.
    fn new(addr: SocketAddr) -> Reconnecting {
        Reconnecting {
            addr,
            sender: None,
            connections: 0,
        }
    }

    async fn call(&mut self, body: &'static [u8]) -> Result<Bytes, String> {
        let usable = self.sender.as_ref().is_some_and(|s| !s.is_closed());
        if !usable {
            self.sender = Some(support::try_connect(self.addr).await?);
            self.connections += 1;
        }
        let Some(sender) = self.sender.as_mut() else {
            return Err("no connection".into());
        };
        let request = Request::post(format!("http://{}/x.Y/Z", self.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(body)))
            .unwrap();
        sender.ready().await.map_err(|e| format!("ready: {e}"))?;
        let response = match sender.send_request(request).await {
            Ok(response) => response,
            // A connection that took no call (GOAWAY raced it): gRPC retries
            // such a call transparently; so does this client, once.
            Err(err) if err.is_canceled() || err.is_closed() => {
                self.sender = None;
                return Box::pin(self.call(body)).await;
            }
            Err(err) => return Err(format!("send: {err}")),
        };
        support::try_body(response).await
    }
}

/// A tlcd (no take-over) that listens on `listen` and offers its
/// listeners at `socket`: the offer is made once the sidecar serves.
async fn serving(
    listen: SocketAddr,
    upstream: SocketAddr,
    socket: &Path,
    log: &Path,
) -> KillOnDrop {
    let running = KillOnDrop(tlcd_under(&[], listen, upstream, socket, log, false));
    wait_for_port(listen);
    wait_for_offer(socket).await;
    running
}

/// A tlcd that takes over the listeners offered at `socket`, logging to
/// `log`.
fn successor(listen: SocketAddr, upstream: SocketAddr, socket: &Path, log: &Path) -> KillOnDrop {
    KillOnDrop(tlcd_under(&[], listen, upstream, socket, log, true))
}

/// Waits until a tlcd offers its listeners at `socket` (once it serves).
async fn wait_for_offer(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no hand-over socket");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wait_for_port(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "tlcd never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_takes_the_sockets_over_without_a_failed_call() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("handover.sock");
    let upstream = start_echo_server().await;
    let listen = free_addr();
    let mut old = serving(listen, upstream, &socket, &dir.path().join("old.log")).await;

    // Calls all the way through the hand-over.
    let calls = tokio::spawn(async move {
        let mut client = Reconnecting::new(listen);
        let mut answered = 0u32;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(4) {
            let reply = client.call(b"\0\0\0\0\x04ping").await;
            assert_eq!(
                reply.as_deref(),
                Ok(&b"\0\0\0\0\x04ping"[..]),
                "call {answered} failed"
            );
            answered += 1;
        }
        (answered, client.connections)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _new = successor(listen, upstream, &socket, &dir.path().join("new.log"));

    // The old tlcd closes its connections gracefully and exits.
    exits(&mut old.0, Duration::from_secs(15), "the predecessor").await;
    let (answered, connections) = calls.await.unwrap();
    assert!(answered > 50, "only {answered} calls went through");
    assert!(
        connections >= 2,
        "the client never moved to the successor ({connections} connection)"
    );
    let old_log = std::fs::read_to_string(dir.path().join("old.log")).unwrap();
    assert!(
        old_log.contains("a successor took the listening sockets over"),
        "{old_log}"
    );
    let new_log = std::fs::read_to_string(dir.path().join("new.log")).unwrap();
    assert!(
        new_log.contains("took the listening sockets over"),
        "{new_log}"
    );
    // And the successor serves new connections on the same port.
    let mut fresh = Reconnecting::new(listen);
    assert_eq!(
        fresh.call(b"\0\0\0\0\x01x").await.as_deref(),
        Ok(&b"\0\0\0\0\x01x"[..])
    );
}

/// Waits up to `limit` for `child` to exit, successfully.
async fn exits(child: &mut Child, limit: Duration, what: &str) {
    let status = exit_status(child, limit, what).await;
    assert!(status.success(), "{what} exited with {status}");
}

/// How `child` exited, within `limit` (else the test fails, `what` says
/// what did not exit).
async fn exit_status(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_reads_every_byte_of_its_calls_through_a_take_over() {
    // Megabytes of each answer are still in the old tlcd's socket buffers
    // when it closes the connection, and the client keeps sending window
    // updates while it reads them: a close that resets the connection
    // loses them (see tests/hand_off.rs).
    const SIZE: usize = 2 << 20;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("handover.sock");
    let upstream = support::slow::large_answers(SIZE).await;
    let listen = free_addr();
    let mut old = serving(listen, upstream, &socket, &dir.path().join("old.log")).await;
    let client = support::slow::SlowClient::connect(listen, 16 << 10).await;
    let calls: Vec<_> = (0..4).map(|_| client.call()).collect();
    client.wait_for(256 << 10).await;
    let _new = successor(listen, upstream, &socket, &dir.path().join("new.log"));
    let mut failures = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Ok(len) => assert_eq!(len, SIZE),
            Err(err) => failures.push(err),
        }
    }
    let old_log = || std::fs::read_to_string(dir.path().join("old.log")).unwrap();
    assert!(failures.is_empty(), "{failures:#?}\n{}", old_log());
    exits(&mut old.0, Duration::from_secs(20), "the predecessor").await;
    assert!(old_log().contains("drained"), "{}", old_log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_over_without_a_running_tlcd_fails_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let upstream = start_echo_server().await;
    let mut child = tlcd_under(
        &[],
        free_addr(),
        upstream,
        &socket,
        &dir.path().join("log"),
        true,
    );
    let status = child.wait().unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(
        log.contains("--take-over") && log.contains("nobody.sock"),
        "{log}"
    );
}

/// How this machine makes a new network namespace for one command:
/// `unshare --net` as root, else in a user namespace of its own
/// (`unshare -rn`); `None` when neither works here.
fn new_network_namespace() -> Option<&'static [&'static str]> {
    const WAYS: [&[&str]; 2] = [&["unshare", "--net", "--"], &["unshare", "-rn", "--"]];
    WAYS.into_iter().find(|way| {
        Command::new(way[0])
            .args(&way[1..])
            .arg("true")
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// Two tlcds in different network namespaces that share a file system
/// (pods on one host, `ip netns exec`) and a hand-over socket path: the
/// second must not take the first's listeners, which would serve the
/// first namespace's connections, and the first keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tlcd_in_another_network_namespace_takes_nothing_over() {
    let Some(unshare) = new_network_namespace() else {
        eprintln!("skipped: this machine cannot make a network namespace (unshare)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("handover.sock");
    let upstream = start_echo_server().await;
    let listen = free_addr();
    let _first = serving(listen, upstream, &socket, &dir.path().join("first")).await;

    let log = dir.path().join("second");
    let mut second = KillOnDrop(tlcd_under(unshare, listen, upstream, &socket, &log, true));
    // Still running after that: it took the listeners and serves them.
    let what = "the tlcd in another network namespace (it took over)";
    let status = exit_status(&mut second.0, Duration::from_secs(20), what).await;
    assert!(!status.success(), "the tlcd in another namespace started");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("another network namespace"), "{text}");

    let mut client = Reconnecting::new(listen);
    assert_eq!(
        client.call(b"still here").await.unwrap(),
        &b"still here"[..]
    );
    let first = std::fs::read_to_string(dir.path().join("first")).unwrap();
    assert!(first.contains("another network namespace"), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_frees_the_port_but_keeps_the_connection_until_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("handover.sock");
    let upstream = start_echo_server().await;
    let listen = free_addr();
    let mut tlcd = KillOnDrop(tlcd_under(
        &[],
        listen,
        upstream,
        &socket,
        &dir.path().join("log"),
        false,
    ));
    wait_for_port(listen);
    let mut client = Reconnecting::new(listen);
    assert_eq!(
        client.call(b"\0\0\0\0\x01a").await.as_deref(),
        Ok(&b"\0\0\0\0\x01a"[..])
    );

    let status = Command::new("kill")
        .args(["-TERM", &tlcd.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        tlcd.0.try_wait().unwrap().is_none(),
        "tlcd exited with a connection open"
    );
    // No new connections: nothing is listening (no copy of the socket is
    // kept for a successor either).
    assert!(
        std::net::TcpStream::connect(listen).is_err(),
        "a draining tlcd still accepts connections"
    );
    // The established connection keeps working.
    for _ in 0..3 {
        assert_eq!(
            client.call(b"\0\0\0\0\x01b").await.as_deref(),
            Ok(&b"\0\0\0\0\x01b"[..])
        );
    }
    assert_eq!(client.connections, 1);
    // Closed by its client: tlcd exits at once, well before drain_seconds.
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = tlcd.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "tlcd did not exit after its last connection closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(
        log.contains("drained: every connection was closed by its task"),
        "{log}"
    );
}
