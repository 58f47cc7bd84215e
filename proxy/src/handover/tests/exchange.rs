//! Whole hand-overs between an `Offer` and `take_over`, good and bad.

use std::time::Duration;

use tokio::net::UnixStream;

use super::*;

const LONG: Duration = Duration::from_secs(10);

/// An offer at a fresh socket path, and a route listener for it to offer:
/// how the exchanges with one listener begin.
fn offer_with_route() -> (tempfile::TempDir, PathBuf, Offer, TcpListener, SocketAddr) {
    let (dir, path) = socket_path();
    let offer = Offer::bind(&path).expect("bind");
    let (route, addr) = listener();
    (dir, path, offer, route, addr)
}

#[tokio::test]
async fn two_listeners_are_handed_over_and_accept() {
    let (_dir, path) = socket_path();
    let offer = Offer::bind(&path).expect("bind");
    let (route, route_addr) = listener();
    let (admin, admin_addr) = listener();
    let successor_path = path.clone();
    let successor = tokio::spawn(async move {
        let path = successor_path;
        let mut inherited = take_over(&path, LONG).await.expect("take over");
        let got: Vec<_> = inherited
            .listeners
            .iter()
            .map(|l| (l.purpose, l.addr))
            .collect();
        assert_eq!(
            got,
            [(Purpose::Route, route_addr), (Purpose::Admin, admin_addr)]
        );
        assert_eq!(
            inherited.predecessor_pid,
            i32::try_from(std::process::id()).ok()
        );
        assert!(inherited.take(Purpose::Admin, route_addr).is_none());
        let route = inherited.take(Purpose::Route, route_addr).expect("route");
        let admin = inherited.take(Purpose::Admin, admin_addr).expect("admin");
        assert!(inherited.listeners.is_empty());
        serves(route, route_addr).await;
        serves(admin, admin_addr).await;
        inherited.ready().await.expect("ready");
        // The predecessor let go of the path: the successor offers there.
        assert!(!path.exists());
        Offer::bind(&path).expect("the successor's own offer")
    });
    let offered = [
        Offered {
            purpose: Purpose::Route,
            listener: &route,
        },
        Offered {
            purpose: Purpose::Admin,
            listener: &admin,
        },
    ];
    let handed = offer.hand_over(&offered, LONG).await.expect("hand over");
    assert_eq!(
        handed,
        HandedOver {
            pid: std::process::id(),
            tlcd: env!("CARGO_PKG_VERSION").to_string(),
            listeners: 2,
        }
    );
    let next = successor.await.expect("the successor's checks");
    drop(offer);
    assert!(path.exists(), "the old offer leaves the new one's file");
    drop(next);
    assert!(!path.exists());
}

#[tokio::test]
async fn a_waiting_connection_outlives_the_predecessors_copy() {
    let (_dir, path) = socket_path();
    let offer = Offer::bind(&path).expect("bind");
    let (route, addr) = listener();
    let predecessor = tokio::spawn(async move {
        let offered = [Offered {
            purpose: Purpose::Route,
            listener: &route,
        }];
        let handed = offer.hand_over(&offered, LONG).await;
        // The predecessor exits: its descriptor and its offer go.
        drop(route);
        drop(offer);
        handed
    });
    let mut inherited = take_over(&path, LONG).await.expect("take over");
    // Made while both processes hold the socket, accepted by neither yet.
    let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let listener = inherited.take(Purpose::Route, addr).expect("route");
    inherited.ready().await.expect("ready");
    let handed = predecessor.await.expect("no panic").expect("handed over");
    assert_eq!(handed.listeners, 1);
    assert!(!path.exists(), "the offer's socket file is removed");

    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let (mut accepted, _) = listener.accept().await.expect("accept");
    echo(&mut client, &mut accepted).await;
    // And the port still takes new connections.
    let mut late = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut accepted, _) = listener.accept().await.expect("accept");
    echo(&mut late, &mut accepted).await;
}

/// Sends `hello` as a successor would and returns the predecessor's error
/// and what it answered.
async fn refused(offer: &Offer, offered: &[Offered<'_>], hello: &[u8]) -> (String, Vec<u8>) {
    let stranger = async {
        let mut stream = UnixStream::connect(offer.path()).await.expect("connect");
        // The predecessor may close before taking it all.
        let _ = stream.write_all(hello).await;
        let _ = stream.shutdown().await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        answer
    };
    let (result, answer) = tokio::join!(offer.hand_over(offered, LONG), stranger);
    let err = result.expect_err("refused");
    (err.to_string(), answer)
}

#[tokio::test]
async fn bad_hellos_are_refused_and_the_offer_stays() {
    let (_dir, path, offer, route, addr) = offer_with_route();
    let offered = [Offered {
        purpose: Purpose::Route,
        listener: &route,
    }];

    let (err, answer) = refused(&offer, &offered, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(err.starts_with("bad hello: not a JSON object"), "{err}");
    assert!(
        matches!(Manifest::parse(&answer), Err(HandoverError::Refused(why)) if why.contains("bad hello"))
    );

    let (err, _) = refused(&offer, &offered, &vec![b'{'; MAX_LINE + 10]).await;
    assert_eq!(err, "the hello is longer than 65536 bytes");

    let v2 = br#"{"hello":"tlcd-handover","version":2,"pid":1,"tlcd":"9.0.0"}"#;
    let (err, answer) = refused(&offer, &offered, &[&v2[..], b"\n"].concat()).await;
    assert!(
        err.starts_with("the hello is of hand-over version 2, this tlcd speaks version 1"),
        "{err}"
    );
    match Manifest::parse(&answer) {
        Err(HandoverError::Refused(why)) => assert!(why.contains("version 2"), "{why}"),
        other => panic!("not a refusal: {other:?}"),
    }

    let other = br#"{"hello":"redis","version":1,"pid":1,"tlcd":"0.1.0"}"#;
    let (err, _) = refused(&offer, &offered, &[&other[..], b"\n"].concat()).await;
    assert!(err.contains("bad hello: it does not open with"), "{err}");

    // A successor that closes at once.
    let (err, _) = refused(&offer, &offered, b"").await;
    assert_eq!(
        err,
        "the peer closed the hand-over connection before its hello"
    );

    // The same offer still hands over to a proper successor.
    let successor = async {
        let mut inherited = take_over(&path, LONG).await.expect("take over");
        let listener = inherited.take(Purpose::Route, addr).expect("route");
        inherited.ready().await.expect("ready");
        listener
    };
    let (handed, listener) = tokio::join!(offer.hand_over(&offered, LONG), successor);
    assert_eq!(handed.expect("handed over").listeners, 1);
    serves(listener, addr).await;
}

#[tokio::test]
async fn a_successor_that_leaves_or_fails_leaves_the_listeners_serving() {
    let (_dir, path, offer, route, addr) = offer_with_route();
    let offered = [Offered {
        purpose: Purpose::Route,
        listener: &route,
    }];

    let leaves = async {
        let inherited = take_over(&path, LONG).await.expect("take over");
        assert_eq!(inherited.listeners.len(), 1);
        drop(inherited);
    };
    let (result, ()) = tokio::join!(offer.hand_over(&offered, LONG), leaves);
    let err = result.expect_err("no ready").to_string();
    assert_eq!(
        err,
        "the peer closed the hand-over connection before its ready line"
    );

    let fails = async {
        let inherited = take_over(&path, LONG).await.expect("take over");
        inherited.fail("cannot read tlcd.toml").await.expect("told");
    };
    let (result, ()) = tokio::join!(offer.hand_over(&offered, LONG), fails);
    let err = result.expect_err("not ready").to_string();
    assert_eq!(err, "the successor is not serving: cannot read tlcd.toml");

    let hangs = async {
        let inherited = take_over(&path, LONG).await.expect("take over");
        tokio::time::sleep(Duration::from_millis(600)).await;
        inherited
    };
    let (result, _inherited) =
        tokio::join!(offer.hand_over(&offered, Duration::from_millis(200)), hangs);
    let err = result.expect_err("too late").to_string();
    assert_eq!(err, "no ready line from the successor within 200ms");

    // The predecessor's own listener still accepts.
    serves(route.try_clone().expect("a copy"), addr).await;
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
    let (dir, path) = socket_path();
    // Left by a tlcd that died: the file is there, nobody accepts.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let offer = Offer::bind(&path).expect("the stale socket is replaced");
    let meta = std::fs::metadata(&path).expect("the socket");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    let err = Offer::bind(&path).expect_err("in use").to_string();
    assert_eq!(
        err,
        format!("another tlcd offers its listeners at {}; stop it or give this one another port or socket", shown(&path))
    );
    assert!(path.exists(), "the live offer's socket stays");
    drop(offer);
    assert!(!path.exists(), "dropped, the offer removes its socket");

    let file = dir.path().join("a-file");
    std::fs::write(&file, "keep me").expect("write");
    let err = Offer::bind(&file).expect_err("not a socket").to_string();
    assert!(
        err.starts_with(&format!("{} exists and is not a socket", shown(&file))),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).expect("kept"), b"keep me");

    // A missing directory is made private.
    let nested = dir.path().join("run").join("handover.sock");
    let offer = Offer::bind(&nested).expect("bind");
    let meta = std::fs::metadata(dir.path().join("run")).expect("made");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o700
    );
    drop(offer);

    let err = take_over(&path, LONG)
        .await
        .expect_err("nobody offers")
        .to_string();
    assert!(
        err.starts_with(&format!("cannot reach a running tlcd at {}", shown(&path))),
        "{err}"
    );
}

#[test]
fn the_default_path_is_in_the_runtime_directory() {
    let path = default_socket_path(4322);
    // Named after this process's network namespace, as `/proc` shows it.
    let netns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let inode = netns
        .to_str()
        .unwrap()
        .trim_start_matches("net:[")
        .trim_end_matches(']');
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(format!("handover-4322-net-{inode}.sock").as_str())
    );
    assert_eq!(
        path.parent(),
        Some(tlc_core::runtime_dir::directory().as_path())
    );
}
