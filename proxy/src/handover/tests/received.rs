//! What the successor makes of what a (fake) predecessor sends: the wrong
//! number of descriptors, descriptors that are not listening TCP sockets,
//! too many, a manifest split over several messages.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::UnixListener;

use super::*;

const LONG: Duration = Duration::from_secs(10);

/// Accepts one successor at `path`, reads its hello, sends `line` with
/// `fds` in `pieces` sends (the descriptors with the first), and returns
/// the line it answered (empty if none).
fn fake_predecessor(
    path: &Path,
    line: Vec<u8>,
    fds: Vec<OwnedFd>,
    pieces: usize,
) -> tokio::task::JoinHandle<Vec<u8>> {
    let listener = UnixListener::bind(path).expect("bind");
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        let mut stream = BufReader::new(stream);
        let hello = wire::read_line(&mut stream, "hello").await.expect("hello");
        Hello::parse(&hello).expect("a good hello");
        let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
        let size = line.len().div_ceil(pieces);
        for (i, piece) in line.chunks(size).enumerate() {
            let attach = if i == 0 { &borrowed[..] } else { &[] };
            wire::send_with_fds(stream.get_ref(), piece, attach)
                .await
                .expect("send");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Closing after the answer is the goodbye `ready` waits for.
        wire::read_line(&mut stream, "answer")
            .await
            .unwrap_or_default()
    })
}

fn manifest_line(entries: &[(Purpose, SocketAddr)]) -> Vec<u8> {
    Manifest {
        listeners: entries
            .iter()
            .map(|&(purpose, addr)| ManifestEntry { purpose, addr })
            .collect(),
    }
    .to_line()
}

fn fd_of(listener: &TcpListener) -> OwnedFd {
    OwnedFd::from(listener.try_clone().expect("a duplicate"))
}

/// Runs a take-over against the fake and returns its error and the answer.
async fn refused(line: Vec<u8>, fds: Vec<OwnedFd>) -> (String, Vec<u8>) {
    let (_dir, path) = socket_path();
    let fake = fake_predecessor(&path, line, fds, 1);
    let err = take_over(&path, LONG)
        .await
        .expect_err("refused")
        .to_string();
    (err, fake.await.expect("the fake ran"))
}

/// The reason in a `{"ready":false,...}` answer.
fn not_ready(answer: &[u8]) -> String {
    match Ready::parse(answer).expect("a ready line") {
        Ready::Failed(why) => why,
        Ready::Serving => panic!("said ready"),
    }
}

#[tokio::test]
async fn fewer_or_more_descriptors_than_listed_are_refused() {
    let (a, a_addr) = listener();
    let (b, b_addr) = listener();
    let two = manifest_line(&[(Purpose::Route, a_addr), (Purpose::Admin, b_addr)]);
    let (err, answer) = refused(two, vec![fd_of(&a)]).await;
    assert_eq!(
        err,
        "the manifest lists 2 listeners but 1 descriptors came with it"
    );
    assert_eq!(not_ready(&answer), err);

    let one = manifest_line(&[(Purpose::Route, a_addr)]);
    let (err, _) = refused(one, vec![fd_of(&a), fd_of(&b)]).await;
    assert_eq!(
        err,
        "the manifest lists 1 listeners but 2 descriptors came with it"
    );

    let many = (0..=MAX_LISTENERS).map(|_| fd_of(&a)).collect();
    let (err, answer) = refused(manifest_line(&[(Purpose::Route, a_addr)]), many).await;
    assert_eq!(err, "more than 64 descriptors came with the manifest");
    assert_eq!(not_ready(&answer), err);
}

#[tokio::test]
async fn descriptors_must_be_the_listeners_listed() {
    let (a, a_addr) = listener();
    let (_b, b_addr) = listener();
    let wrong_addr = manifest_line(&[(Purpose::Route, b_addr)]);
    let (err, _) = refused(wrong_addr, vec![fd_of(&a)]).await;
    assert_eq!(
        err,
        format!(
            "the route listener handed over for {b_addr} is not usable: it is bound to {a_addr}"
        )
    );

    // A connected TCP socket, not a listening one.
    let client = std::net::TcpStream::connect(a_addr).expect("connect");
    let client_addr = client.local_addr().expect("its address");
    let line = manifest_line(&[(Purpose::Admin, client_addr)]);
    let (err, answer) = refused(line, vec![OwnedFd::from(client)]).await;
    assert_eq!(
        err,
        format!("the admin listener handed over for {client_addr} is not usable: the socket is not listening")
    );
    assert_eq!(not_ready(&answer), err);

    // A Unix socket.
    let (unix, _) = std::os::unix::net::UnixStream::pair().expect("a pair");
    let line = manifest_line(&[(Purpose::Metrics, a_addr)]);
    let (err, _) = refused(line, vec![OwnedFd::from(unix)]).await;
    assert!(err.ends_with("is not usable: not an IP socket"), "{err}");

    // A UDP socket.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let line = manifest_line(&[(Purpose::Route, a_addr)]);
    let (err, _) = refused(line, vec![OwnedFd::from(udp)]).await;
    assert!(err.ends_with("is not usable: not a TCP socket"), "{err}");
}

#[tokio::test]
async fn a_manifest_in_several_pieces_is_read_whole() {
    let (_dir, path) = socket_path();
    let (a, a_addr) = listener();
    let (b, b_addr) = listener();
    let line = manifest_line(&[(Purpose::Route, a_addr), (Purpose::Metrics, b_addr)]);
    let fake = fake_predecessor(&path, line, vec![fd_of(&a), fd_of(&b)], 3);
    let mut inherited = take_over(&path, LONG).await.expect("take over");
    assert_eq!(inherited.listeners.len(), 2);
    let b_inherited = inherited.take(Purpose::Metrics, b_addr).expect("metrics");
    inherited.ready().await.expect("ready");
    assert_eq!(fake.await.expect("the fake ran"), Ready::Serving.to_line());
    serves(b_inherited, b_addr).await;
    drop(a);

    // Garbage instead of a manifest, and a refusal.
    let (err, answer) = refused(b"nonsense\n".to_vec(), vec![]).await;
    assert!(err.starts_with("bad manifest: not a JSON object"), "{err}");
    assert_eq!(not_ready(&answer), err);
    let (err, answer) = refused(Manifest::refusal_line("no"), vec![]).await;
    assert_eq!(
        err,
        "the running tlcd refused to hand over its listeners: no"
    );
    assert!(answer.is_empty(), "a refusal gets no answer");
    let (err, _) = refused(b"{\"version\":1,\"listeners\":[]}\nmore".to_vec(), vec![]).await;
    assert_eq!(
        err,
        "bad manifest: bytes follow it before the successor's ready"
    );
}

#[tokio::test]
async fn a_predecessor_that_says_nothing_times_out() {
    let (_dir, path) = socket_path();
    let listener = UnixListener::bind(&path).expect("bind");
    let silent = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(stream);
    });
    let err = take_over(&path, Duration::from_millis(200))
        .await
        .expect_err("timed out")
        .to_string();
    assert_eq!(err, "no hand-over from the running tlcd within 200ms");
    silent.await.expect("no panic");
}
