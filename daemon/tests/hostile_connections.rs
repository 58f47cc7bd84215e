//! What a connection that does not play by the rules can make a listener
//! hold: slots taken by connections that are not HTTP/2, slots held by
//! clients that never close or never read, bytes sent in cleartext where
//! mutual TLS is on, lookups made for sockets that say nothing. Each test
//! asserts the bound (slots back, bytes seen, lookups made), with hostile
//! clients on real loopback sockets.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use tlc_core::Role;
use tlc_proxy::intercept::{self, Destination};
use tlc_proxy::limits::settings::LimitSettings;
use tlc_proxy::Proxy;
use tlc_sidecar::Sidecar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::certs::{make_certs, tls, PS, WORKER};

/// What a local client sends that must never cross the network in the clear.
const SECRET_REQUEST: &[u8] = b"GET /health HTTP/1.1\r\nAuthorization: Bearer s3cr3t\r\n\r\n";
const SECRET: &[u8] = b"s3cr3t";
const HTTP1_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A route without TLS under `limits`: how most tests here start their proxy.
async fn plain(
    role: Role,
    upstream: SocketAddr,
    sidecar: Arc<Sidecar>,
    limits: LimitSettings,
) -> Proxy<Sidecar> {
    support::proxy_configured(role, upstream, sidecar, |config| config.limits = limits).await
}

/// Refusals of `sidecar`'s listeners so far for the reason labelled `name`.
fn refused(sidecar: &Sidecar, name: &str) -> u64 {
    sidecar
        .stats()
        .connections()
        .refusals()
        .find(|(r, _)| r.name() == name)
        .map_or(0, |(_, n)| n)
}

/// Connections `sidecar` closed hard for the reason labelled `name`.
fn cut(sidecar: &Sidecar, name: &str) -> u64 {
    sidecar
        .stats()
        .connections()
        .cuts()
        .find(|(c, _)| c.name() == name)
        .map_or(0, |(_, n)| n)
}

/// Waits until `done` holds, for at most `limit`; how long it took, or
/// `None` if it never held.
async fn within(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done().then(|| started.elapsed())
}

/// One gRPC-shaped call on a new HTTP/2 connection to `addr`: what a
/// TensorFlow task does; an error says where it failed.
async fn try_call(addr: SocketAddr) -> Result<Bytes, String> {
    let call = async {
        let mut sender = support::try_connect(addr).await?;
        let request = http::Request::post(format!("http://{addr}/test.Echo/Call"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\x02hi")))
            .unwrap();
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("call: {e}"))?;
        support::try_body(response).await
    };
    tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .map_err(|_| "no answer in 3 s".to_string())?
}

/// Whether `socket` is closed by the other side within `limit`: a read
/// returns its end (or an error) rather than staying pending.
async fn closed_within(socket: &mut TcpStream, limit: Duration) -> bool {
    let mut scratch = [0u8; 256];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut scratch)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A server that accepts and keeps every connection without a word.
async fn start_silent_server() -> SocketAddr {
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = server.accept().await {
            held.push(socket);
        }
    });
    addr
}

/// Slots: connections that are not HTTP/2 may take
/// `limits.max_opaque_connections` of them and no more, however long they
/// stay, so HTTP/2 still gets served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_connections_leave_the_slots_http2_needs() {
    let echo = support::start_echo_server().await;
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        max_connections: 6,
        max_opaque_connections: 2,
        close_seconds: 5,
        ..Default::default()
    };
    let proxy = plain(Role::Outbound, echo, sidecar.clone(), limits).await;
    let addr = proxy.local_addrs()[0];
    // Two bytes that are not HTTP/2 on every slot, then silence; the
    // upstream (an HTTP/2 server) closes at once, the client never does.
    let mut hostile = Vec::new();
    for _ in 0..6 {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(b"XX").await.unwrap();
        hostile.push(socket);
    }
    let all_refused = within(Duration::from_secs(3), || {
        refused(&sidecar, "opaque_limit") == 4
    })
    .await;
    let served = try_call(addr).await;
    eprintln!(
        "6 hostile sockets: opaque {} refused opaque_limit {} limit {}; open {}; HTTP/2 call: {:?}",
        sidecar.stats().connections().opaque_total(),
        refused(&sidecar, "opaque_limit"),
        refused(&sidecar, "limit"),
        sidecar.stats().connections().open_now(),
        served.as_ref().map(|b| b.len()),
    );
    assert!(all_refused.is_some(), "4 of 6 refused for the opaque cap");
    assert_eq!(sidecar.stats().connections().opaque_total(), 2);
    assert_eq!(served.unwrap().len(), 7, "the HTTP/2 call is served");
    assert_eq!(refused(&sidecar, "limit"), 0);
}

/// Time: a forwarded connection that passes no byte for
/// `limits.opaque_idle_seconds` is closed; one whose server closed is
/// closed `limits.close_seconds` later, even if its client never closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_slot_comes_back_when_idle_or_half_closed() {
    let silent = start_silent_server().await;
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        max_opaque_connections: 1,
        opaque_idle_seconds: 2,
        close_seconds: 1,
        ..Default::default()
    };
    let proxy = plain(Role::Outbound, silent, sidecar.clone(), limits).await;
    let connections = sidecar.stats().connections();
    let mut idle = TcpStream::connect(proxy.local_addrs()[0]).await.unwrap();
    idle.write_all(b"XX").await.unwrap();
    within(Duration::from_secs(2), || connections.open_now() == 1).await;
    let idle_released = within(Duration::from_secs(4), || connections.open_now() == 0).await;
    let idle_closed = closed_within(&mut idle, Duration::from_millis(100)).await;

    // A server that reads the request and closes; the client neither
    // reads nor closes.
    let closing = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closing_addr = closing.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = closing.accept().await {
            let mut two = [0u8; 2];
            let _ = socket.read_exact(&mut two).await;
        }
    });
    let sidecar2 = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        max_opaque_connections: 1,
        opaque_idle_seconds: 60,
        close_seconds: 1,
        ..Default::default()
    };
    let proxy2 = plain(Role::Outbound, closing_addr, sidecar2.clone(), limits).await;
    let connections2 = sidecar2.stats().connections();
    let mut half = TcpStream::connect(proxy2.local_addrs()[0]).await.unwrap();
    half.write_all(b"XX").await.unwrap();
    within(Duration::from_secs(2), || connections2.opaque_total() == 1).await;
    let half_released = within(Duration::from_secs(3), || connections2.open_now() == 0).await;
    // The slot is free: the next one is forwarded, not refused.
    let mut next = TcpStream::connect(proxy2.local_addrs()[0]).await.unwrap();
    next.write_all(b"XX").await.unwrap();
    within(Duration::from_secs(2), || connections2.opaque_total() == 2).await;
    eprintln!(
        "idle: released after {idle_released:?} (client closed: {idle_closed}); \
         half-closed: released after {half_released:?}; next forwarded: {}",
        connections2.opaque_total() == 2
    );
    let idle_released = idle_released.expect("an idle forwarded connection is closed");
    assert!(
        idle_released >= Duration::from_millis(1500),
        "{idle_released:?}"
    );
    assert!(idle_closed);
    assert_eq!(cut(&sidecar, "opaque_idle"), 1);
    half_released.expect("a half-closed forwarded connection is closed");
    assert_eq!(cut(&sidecar2, "half_closed"), 1);
    assert_eq!(connections2.opaque_total(), 2);
    assert_eq!(refused(&sidecar2, "opaque_limit"), 0);
    drop(half);
}

/// A peer's HTTP/2 connection that idled out is sent its GOAWAY; a client
/// that never reads it keeps its slot `limits.close_seconds` more, no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_client_that_never_reads_gives_its_slot_back() {
    let echo = support::start_echo_server().await;
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        max_connections: 1,
        idle_seconds: 1,
        close_seconds: 1,
        ..Default::default()
    };
    let proxy = plain(Role::Inbound, echo, sidecar.clone(), limits).await;
    let addr = proxy.local_addrs()[0];
    let connections = sidecar.stats().connections();
    let mut deaf = TcpStream::connect(addr).await.unwrap();
    deaf.write_all(tlc_proxy::preface::PREFACE).await.unwrap();
    // An empty SETTINGS frame; then nothing is ever read.
    deaf.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let opened = within(Duration::from_secs(2), || connections.open_now() == 1).await;
    let released = within(Duration::from_secs(4), || connections.open_now() == 0).await;
    // The slot (the only one) serves the next client.
    let mut served = Err(String::new());
    for _ in 0..10 {
        served = try_call(addr).await;
        if served.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "opened: {opened:?}; released after {released:?}; idle closed {}; next call {:?}; refused limit {}",
        connections.idle_closed_total(),
        served.as_ref().map(|b| b.len()),
        refused(&sidecar, "limit"),
    );
    assert!(opened.is_some());
    let released = released.expect("the slot comes back");
    assert!(released <= Duration::from_millis(3500), "{released:?}");
    assert_eq!(connections.idle_closed_total(), 1);
    assert_eq!(cut(&sidecar, "goaway_timeout"), 1);
    assert_eq!(served.unwrap().len(), 7);
    drop(deaf);
}

/// An HTTP/1.1 server: answers a request that carries the secret header;
/// counts the connections it accepted.
async fn start_http1_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = server.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = vec![0u8; SECRET_REQUEST.len()];
                if socket.read_exact(&mut request).await.is_ok() && request == SECRET_REQUEST {
                    let _ = socket.write_all(HTTP1_ANSWER).await;
                }
            });
        }
    });
    (addr, accepted)
}

/// Under mutual TLS, a connection that is not HTTP/2 crosses to the peer
/// inside TLS or not at all: a sniffer behind the outbound route sees no
/// byte of it in the clear; between two sidecars an HTTP/1.1 exchange still
/// works; plaintext that is not HTTP/2 reaching the TLS side goes nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_bytes_cross_only_inside_mutual_tls() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_certs(dir, &["ps", "worker"]);

    // The sniffer: a "peer" that records every byte it receives.
    let sniffer = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sniffer_addr = sniffer.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let sniffing = tokio::spawn(async move {
        let (mut socket, _) = sniffer.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let until = tokio::time::Instant::now() + Duration::from_millis(1500);
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, socket.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            recorded.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let requester = Arc::new(support::compressing_sidecar());
    let outbound =
        support::proxy_configured(Role::Outbound, sniffer_addr, requester.clone(), |c| {
            c.tls = tls(dir, "worker", &[PS])
        })
        .await;
    let mut client = TcpStream::connect(outbound.local_addrs()[0]).await.unwrap();
    client.write_all(SECRET_REQUEST).await.unwrap();
    tokio::time::timeout(Duration::from_secs(4), sniffing)
        .await
        .expect("the sniffer was dialled")
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    let cleartext = seen.windows(SECRET.len()).any(|w| w == SECRET);
    eprintln!(
        "sniffer saw {} bytes, first {:?}; the secret in the clear: {cleartext}",
        seen.len(),
        seen.first()
    );
    assert!(!cleartext, "the secret crossed in cleartext");
    assert_eq!(seen.first(), Some(&0x16), "a TLS handshake, nothing else");
    drop(client);

    // Two sidecars with TLS: the exchange goes through, decrypted only
    // on the server's side.
    let (http1, accepted) = start_http1_server().await;
    let holder = Arc::new(support::compressing_sidecar());
    let holder_limits = LimitSettings {
        handshake_seconds: 2,
        server_first_seconds: 1,
        ..Default::default()
    };
    let inbound = support::proxy_configured(Role::Inbound, http1, holder.clone(), |c| {
        c.limits = holder_limits;
        c.tls = tls(dir, "ps", &[WORKER]);
    })
    .await;
    let to_inbound = inbound.local_addrs()[0];
    let outbound = support::proxy_configured(Role::Outbound, to_inbound, requester.clone(), |c| {
        c.tls = tls(dir, "worker", &[PS])
    })
    .await;
    let mut client = TcpStream::connect(outbound.local_addrs()[0]).await.unwrap();
    client.write_all(SECRET_REQUEST).await.unwrap();
    let mut answer = Vec::new();
    let answered =
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer)).await;
    eprintln!(
        "through two sidecars: {:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(answered.is_ok(), "no answer through the sidecars");
    assert_eq!(answer, HTTP1_ANSWER);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);

    // Plaintext that is not HTTP/2, straight to the TLS side: refused,
    // nothing forwarded; a silent one is closed at the handshake time.
    let mut stranger = TcpStream::connect(inbound.local_addrs()[0]).await.unwrap();
    stranger.write_all(SECRET_REQUEST).await.unwrap();
    let mut silent = TcpStream::connect(inbound.local_addrs()[0]).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stranger.read_to_end(&mut answer)).await;
    let silent_closed = closed_within(&mut silent, Duration::from_secs(3)).await;
    eprintln!(
        "plaintext to the TLS side: answered {:?}; forwarded {} (1 expected from before); \
         refused tls {} handshake {}; silent closed {silent_closed}",
        String::from_utf8_lossy(&answer),
        accepted.load(Ordering::SeqCst),
        refused(&holder, "tls"),
        refused(&holder, "handshake"),
    );
    assert!(answer.is_empty());
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "nothing forwarded");
    assert_eq!(refused(&holder, "tls"), 1);
    assert!(silent_closed);
    // Counted as the socket closes: maybe a moment after the client saw it.
    within(Duration::from_secs(1), || {
        refused(&holder, "handshake") == 1
    })
    .await;
    assert_eq!(refused(&holder, "handshake"), 1);
}

/// A protocol whose server speaks first (SMTP's greeting), and a client
/// whose one byte could begin the HTTP/2 preface, are forwarded after
/// `limits.server_first_seconds` of waiting; a client that still says
/// nothing at `limits.handshake_seconds` is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_speak_first_are_reached() {
    let smtp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smtp_addr = smtp.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = smtp.accept().await {
            tokio::spawn(async move {
                socket.write_all(b"220 ready\r\n").await.unwrap();
                let mut buf = [0u8; 64];
                while let Ok(n) = socket.read(&mut buf).await {
                    let reply: &[u8] = match &buf[..n] {
                        [] => return,
                        b"P" => b"got P\r\n",
                        said if said.starts_with(b"EHLO") => b"250 ok\r\n",
                        _ => b"500 what\r\n",
                    };
                    if socket.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        server_first_seconds: 1,
        handshake_seconds: 3,
        ..Default::default()
    };
    let proxy = plain(Role::Outbound, smtp_addr, sidecar.clone(), limits).await;
    let addr = proxy.local_addrs()[0];

    /// `n` bytes from `socket`, or what came of them within 4 s.
    async fn read_n(socket: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        let until = tokio::time::Instant::now() + Duration::from_secs(4);
        while got < n {
            match tokio::time::timeout_at(until, socket.read(&mut buf[got..])).await {
                Ok(Ok(read)) if read > 0 => got += read,
                _ => break,
            }
        }
        buf.truncate(got);
        buf
    }
    let started = Instant::now();
    let mut greeted = TcpStream::connect(addr).await.unwrap();
    let mut opener = TcpStream::connect(addr).await.unwrap();
    opener.write_all(b"P").await.unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let greeting = read_n(&mut greeted, 11).await;
    let waited = started.elapsed();
    greeted.write_all(b"EHLO me\r\n").await.unwrap();
    let helo = read_n(&mut greeted, 8).await;
    let opened = read_n(&mut opener, 18).await;
    let silent_greeting = read_n(&mut silent, 11).await;
    let silent_closed = closed_within(&mut silent, Duration::from_secs(3)).await;
    let silent_after = started.elapsed();
    eprintln!(
        "greeting {:?} after {waited:?}, EHLO answered {:?}; one-byte opener: {:?}; \
         silent: {:?}, closed {silent_closed} after {silent_after:?}; opaque {} handshake {}",
        String::from_utf8_lossy(&greeting),
        String::from_utf8_lossy(&helo),
        String::from_utf8_lossy(&opened),
        String::from_utf8_lossy(&silent_greeting),
        sidecar.stats().connections().opaque_total(),
        refused(&sidecar, "handshake"),
    );
    assert_eq!(greeting, b"220 ready\r\n");
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert_eq!(helo, b"250 ok\r\n");
    assert_eq!(opened, b"220 ready\r\ngot P\r\n");
    assert_eq!(silent_greeting, b"220 ready\r\n");
    assert!(silent_closed);
    assert!(
        silent_after >= Duration::from_millis(2800) && silent_after < Duration::from_millis(4500),
        "{silent_after:?}"
    );
    assert_eq!(sidecar.stats().connections().opaque_total(), 3);
    // Counted as the socket closes: maybe a moment after the client saw it.
    within(Duration::from_secs(1), || {
        refused(&sidecar, "handshake") == 1
    })
    .await;
    assert_eq!(refused(&sidecar, "handshake"), 1);
}

/// A route to a name looks the name up once a connection has said what it
/// is, not at accept: a silent connect costs no lookup, and connections
/// close together share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connect_costs_no_lookup() {
    let echo = support::start_echo_server().await;
    let sidecar = Arc::new(support::compressing_sidecar());
    let limits = LimitSettings {
        handshake_seconds: 1,
        ..Default::default()
    };
    let name: Destination = format!("localhost:{}", echo.port()).parse().unwrap();
    let proxy =
        support::proxy_configured(Role::Outbound, name, sidecar.clone(), |c| c.limits = limits)
            .await;
    let addr = proxy.local_addrs()[0];
    let before = intercept::destination::lookups();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let closed = closed_within(&mut silent, Duration::from_secs(3)).await;
    let silent_lookups = intercept::destination::lookups() - before;
    let first = try_call(addr).await;
    let second = try_call(addr).await;
    let call_lookups = intercept::destination::lookups() - before - silent_lookups;
    eprintln!(
        "silent connect: closed {closed}, {silent_lookups} lookups; two calls: {call_lookups} lookups"
    );
    assert!(closed);
    // Counted as the socket closes: maybe a moment after the client saw it.
    within(Duration::from_secs(1), || {
        refused(&sidecar, "handshake") == 1
    })
    .await;
    assert_eq!(refused(&sidecar, "handshake"), 1);
    assert_eq!(silent_lookups, 0, "a silent connect looked the name up");
    assert_eq!(first.unwrap().len(), 7);
    assert_eq!(second.unwrap().len(), 7);
    assert_eq!(call_lookups, 1, "one lookup for both calls (cached)");
}
