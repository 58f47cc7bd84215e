//! New files replace the configuration for new handshakes; connections
//! made before carry on; broken files change nothing but a counter.

use std::os::unix::fs::symlink;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::tls::{ReloadOutcome, TlsError};

/// Lays out `dir` as a Kubernetes Secret volume does: the files are links
/// through `..data`, a link to a directory of this version's files;
/// rotating swaps `..data` in one rename.
fn secret_volume(dir: &Path, version: &str, ca_pem: &str, leaf: &Leaf) {
    let target = format!("..{version}");
    write_files(&dir.join(&target), ca_pem, leaf);
    let staging = dir.join("..data_tmp");
    symlink(&target, &staging).unwrap();
    std::fs::rename(&staging, dir.join("..data")).unwrap();
    for name in ["ca.crt", "tls.crt", "tls.key"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
}

/// A connection of `client` to `echo`, handshake done.
async fn connected(
    client: &TlsContext,
    echo: &EchoServer,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let (stream, _) = client
        .connect(echo.addr, tcp(echo.addr).await)
        .await
        .unwrap();
    stream
}

/// The certificate a client connection's server presented.
fn presented(stream: &tokio_rustls::client::TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0].clone()
}

#[tokio::test]
async fn tls_reload_new_handshakes_use_new_cert_old_connections_stay() {
    let dir = dir();
    let ca = Ca::new("test CA");
    let now = time::OffsetDateTime::now_utc();
    let hour = time::Duration::hours(1);
    let v1 = ca.leaf_valid(&[PS], &[], now - hour, now + time::Duration::days(30));
    let v2 = ca.leaf_valid(&[PS], &[], now - hour, now + time::Duration::days(60));
    let volume = sub(&dir, "secret");
    std::fs::create_dir_all(&volume).unwrap();
    secret_volume(&volume, "v1", &ca.pem, &v1);
    let server =
        Arc::new(TlsContext::load(&settings(&volume, &["spiffe://test/ns/a/sa/*"])).unwrap());
    let client = context(
        &sub(&dir, "client"),
        &ca.pem,
        &ca.leaf(&[WORKER], &[]),
        &[PS],
    );
    let shutdown = CancellationToken::new();
    let reloader = server.clone().spawn_reloader(shutdown.clone());
    let echo = EchoServer::start(server.clone()).await;

    let mut before = connected(&client, &echo).await;
    assert_eq!(presented(&before), v1.der);
    assert_eq!(round_trip(&mut before, b"one").await.unwrap(), b"one");

    secret_volume(&volume, "v2", &ca.pem, &v2);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.reload_stats().successes == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reload within 10 s: {:?}",
            server.reload_stats()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let stats = server.reload_stats();
    assert_eq!((stats.successes, stats.failures), (1, 0), "{stats:?}");
    assert_eq!(
        stats.not_after_unix,
        (now + time::Duration::days(60)).unix_timestamp()
    );

    let mut after = connected(&client, &echo).await;
    assert_eq!(presented(&after), v2.der);
    assert_eq!(round_trip(&mut after, b"two").await.unwrap(), b"two");
    // The connection made before the reload is untouched.
    assert_eq!(presented(&before), v1.der);
    assert_eq!(round_trip(&mut before, b"still").await.unwrap(), b"still");

    shutdown.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(5), reloader)
        .await
        .expect("the reloader did not stop on shutdown")
        .unwrap();
}

#[tokio::test]
async fn tls_broken_new_files_keep_the_old_configuration() {
    let dir = dir();
    let ca = Ca::new("test CA");
    let v1 = ca.leaf(&[PS], &[]);
    let files = sub(&dir, "server");
    let server = context(&files, &ca.pem, &v1, &["spiffe://test/ns/a/sa/*"]);
    let client = context(
        &sub(&dir, "client"),
        &ca.pem,
        &ca.leaf(&[WORKER], &[]),
        &[PS],
    );
    let echo = EchoServer::start(server.clone()).await;
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Unchanged
    ));

    // A new certificate whose key has not arrived (yet).
    let v2 = ca.leaf(&[PS], &[]);
    std::fs::write(files.join("tls.crt"), &v2.cert_pem).unwrap();
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Failed(TlsError::KeyMismatch { .. })
    ));
    let stats = server.reload_stats();
    assert_eq!((stats.successes, stats.failures), (0, 1));
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("does not belong to the certificate")),
        "{stats:?}"
    );
    // The same broken set is one failure, not one per check.
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Unchanged
    ));
    assert_eq!(server.reload_stats().failures, 1);
    assert_eq!(presented(&connected(&client, &echo).await), v1.der);

    std::fs::write(files.join("tls.crt"), "truncated\n").unwrap();
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Failed(TlsError::NoCertificate { .. })
    ));
    std::fs::remove_file(files.join("tls.key")).unwrap();
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Failed(TlsError::Read { .. })
    ));
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Unchanged
    ));
    assert_eq!(server.reload_stats().failures, 3);
    assert_eq!(presented(&connected(&client, &echo).await), v1.der);

    // The key arrives: the new pair takes over.
    std::fs::write(files.join("tls.crt"), &v2.cert_pem).unwrap();
    std::fs::write(files.join("tls.key"), &v2.key_pem).unwrap();
    assert!(matches!(
        server.reload_if_changed(),
        ReloadOutcome::Reloaded
    ));
    let stats = server.reload_stats();
    assert_eq!((stats.successes, stats.failures), (1, 3));
    assert_eq!(presented(&connected(&client, &echo).await), v2.der);
}
