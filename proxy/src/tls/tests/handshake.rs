//! Who gets through a handshake, and who does not.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{CertificateError, SignatureScheme};
use rustls_pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;
use crate::tls::ALPN_H2;

/// A client resolver that presents no certificate.
#[derive(Debug)]
struct NoCertificate;

impl ResolvesClientCert for NoCertificate {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// `context`'s connector, but presenting `resolver`'s certificate.
fn connector_presenting(
    context: &TlsContext,
    resolver: Arc<dyn ResolvesClientCert>,
) -> TlsConnector {
    let mut config = (*context.client_config()).clone();
    config.client_auth_cert_resolver = resolver;
    TlsConnector::from(Arc::new(config))
}

/// A server and a client from one CA: the server is `PS` (and `ps.test`)
/// accepting `server_accepts`, the client `WORKER` accepting `client_accepts`.
fn pair(
    dir: &tempfile::TempDir,
    server_accepts: &[&str],
    client_accepts: &[&str],
) -> (Ca, Arc<TlsContext>, Arc<TlsContext>) {
    let ca = Ca::new("test CA");
    let server = context(
        &sub(dir, "server"),
        &ca.pem,
        &ca.leaf(&[PS], &["ps.test"]),
        server_accepts,
    );
    let client = context(
        &sub(dir, "client"),
        &ca.pem,
        &ca.leaf(&[WORKER], &["worker.test"]),
        client_accepts,
    );
    (ca, server, client)
}

/// A context that trusts `ca` and accepts `accepts`, but whose own
/// certificate (for `identity`, in `dir/other`) is from another CA.
fn from_another_ca(
    dir: &tempfile::TempDir,
    ca: &Ca,
    identity: &str,
    accepts: &[&str],
) -> Arc<TlsContext> {
    let other = Ca::new("other CA");
    context(
        &sub(dir, "other"),
        &ca.pem,
        &other.leaf(&[identity], &[]),
        accepts,
    )
}

fn invalid_certificate(err: &HandshakeError) -> Option<&CertificateError> {
    match err {
        HandshakeError::Tls(rustls::Error::InvalidCertificate(cause)) => Some(cause),
        _ => None,
    }
}

/// Whether `err` refused a certificate for having expired.
fn refused_as_expired(err: &HandshakeError) -> bool {
    matches!(
        invalid_certificate(err),
        Some(CertificateError::ExpiredContext { .. } | CertificateError::Expired)
    )
}

/// A certificate from `ca` for `identity` that expired yesterday.
fn expired_leaf(ca: &Ca, identity: &str) -> Leaf {
    let now = time::OffsetDateTime::now_utc();
    ca.leaf_valid(
        &[identity],
        &[],
        now - time::Duration::days(30),
        now - time::Duration::days(1),
    )
}

/// A handshake with `echo` through `connector` that `echo` refuses: what
/// the client got, and why `echo` refused.
async fn refused(
    connector: &TlsConnector,
    echo: &mut EchoServer,
) -> (
    std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    HandshakeError,
) {
    let name = ServerName::IpAddress(echo.addr.ip().into());
    let result = connector.connect(name, tcp(echo.addr).await).await;
    (result, echo.next().await.unwrap_err())
}

#[tokio::test]
async fn tls_handshake_with_identities_and_h2() {
    let dir = dir();
    let (_, server, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &["dns:*.test"]);
    let mut echo = EchoServer::start(server).await;
    let (mut stream, server_identity) = client
        .connect(echo.addr, tcp(echo.addr).await)
        .await
        .unwrap();
    // The client accepts the server by its DNS SAN: URI SANs are tried first
    // but none matches the client's only pattern.
    assert_eq!(server_identity.as_str(), "dns:ps.test");
    assert_eq!(echo.next().await.unwrap().as_str(), WORKER);
    let (_, connection) = stream.get_ref();
    assert_eq!(connection.alpn_protocol(), Some(ALPN_H2));
    assert_eq!(
        connection.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(
        client.peer_identity(connection).map(|p| p.to_string()),
        Some("dns:ps.test".to_string())
    );
    assert_eq!(round_trip(&mut stream, b"tensor").await.unwrap(), b"tensor");
}

#[tokio::test]
async fn tls_client_without_certificate_is_refused() {
    let dir = dir();
    let (_, server, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let mut echo = EchoServer::start(server).await;
    let connector = connector_presenting(&client, Arc::new(NoCertificate));
    let (result, err) = refused(&connector, &mut echo).await;
    assert!(
        matches!(
            err,
            HandshakeError::Tls(rustls::Error::NoCertificatesPresented)
        ),
        "{err}"
    );
    // TLS 1.3: the client may finish before the server's alert arrives; it
    // then learns of the refusal on its first read.
    if let Ok(mut stream) = result {
        assert!(round_trip(&mut stream, b"x").await.is_err());
    }
}

#[tokio::test]
async fn tls_client_from_another_ca_is_refused() {
    let dir = dir();
    let (ca, server, _) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let client = from_another_ca(&dir, &ca, WORKER, &[PS]);
    let mut echo = EchoServer::start(server).await;
    let result = client.connect(echo.addr, tcp(echo.addr).await).await;
    let err = echo.next().await.unwrap_err();
    assert_eq!(
        invalid_certificate(&err),
        Some(&CertificateError::UnknownIssuer),
        "{err}"
    );
    if let Ok((mut stream, _)) = result {
        assert!(round_trip(&mut stream, b"x").await.is_err());
    }
}

#[tokio::test]
async fn tls_server_from_another_ca_is_refused() {
    let dir = dir();
    let (ca, _, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let server = from_another_ca(&dir, &ca, PS, &["spiffe://test/ns/a/sa/*"]);
    let echo = EchoServer::start(server).await;
    let err = client
        .connect(echo.addr, tcp(echo.addr).await)
        .await
        .unwrap_err();
    assert_eq!(
        invalid_certificate(&err),
        Some(&CertificateError::UnknownIssuer),
        "{err}"
    );
}

#[tokio::test]
async fn tls_identity_not_matching_is_refused_by_the_server() {
    let dir = dir();
    let (_, server, client) = pair(&dir, &["spiffe://test/ns/b/sa/*", "dns:*.b.test"], &[PS]);
    // The bare acceptor: its verifier must refuse during the handshake.
    let mut echo = EchoServer::start_bare(server.clone()).await;
    let result = client.connect(echo.addr, tcp(echo.addr).await).await;
    match echo.next().await.unwrap_err() {
        HandshakeError::Identity(mismatch) => {
            assert_eq!(mismatch.presented, format!("{WORKER}, dns:worker.test"));
            assert_eq!(
                mismatch.to_string(),
                format!(
                    "peer certificate names {WORKER}, dns:worker.test and none matches \
                     tls.peer_identities [spiffe://test/ns/b/sa/*, dns:*.b.test]"
                )
            );
        }
        other => panic!("{other}"),
    }
    if let Ok((mut stream, _)) = result {
        assert!(round_trip(&mut stream, b"x").await.is_err());
    }
    // And through accept.
    let mut echo = EchoServer::start(server).await;
    let _ = client.connect(echo.addr, tcp(echo.addr).await).await;
    let err = echo.next().await.unwrap_err();
    assert!(matches!(err, HandshakeError::Identity(_)), "{err}");
}

#[tokio::test]
async fn tls_identity_not_matching_is_refused_by_the_client() {
    let dir = dir();
    let (_, server, client) = pair(
        &dir,
        &["spiffe://test/ns/a/sa/*"],
        &["spiffe://test/ns/a/sa/worker", "dns:ps.other"],
    );
    let echo = EchoServer::start(server).await;
    // The bare connector: its verifier must refuse during the handshake,
    // whatever name is dialled (here the server's own DNS SAN).
    let name = ServerName::try_from("ps.test").unwrap();
    let err = client
        .connector()
        .connect(name, tcp(echo.addr).await)
        .await
        .map(drop)
        .map_err(HandshakeError::from)
        .unwrap_err();
    assert!(matches!(err, HandshakeError::Identity(_)), "{err}");
    // And through connect, dialled by IP: the address plays no part.
    let err = client
        .connect(echo.addr, tcp(echo.addr).await)
        .await
        .unwrap_err();
    assert!(matches!(err, HandshakeError::Identity(_)), "{err}");
    assert!(err.to_string().contains("dns:ps.test"), "{err}");
}

#[tokio::test]
async fn tls_expired_client_certificate_is_refused() {
    let dir = dir();
    let (ca, server, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let expired = expired_leaf(&ca, WORKER);
    let mut echo = EchoServer::start(server).await;
    let connector = connector_presenting(
        &client,
        Arc::new(SingleCertAndKey::from(expired.certified())),
    );
    let (_, err) = refused(&connector, &mut echo).await;
    assert!(refused_as_expired(&err), "{err}");
}

#[tokio::test]
async fn tls_expired_server_certificate_is_refused() {
    let dir = dir();
    let (ca, server, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let expired = expired_leaf(&ca, PS);
    let mut config = (*server.server_config()).clone();
    config.cert_resolver = Arc::new(SingleCertAndKey::from(expired.certified()));
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = acceptor.accept(tcp).await;
    });
    let err = client.connect(addr, tcp(addr).await).await.unwrap_err();
    assert!(refused_as_expired(&err), "{err}");
}

#[tokio::test]
async fn tls_peer_without_alpn_h2_is_refused() {
    let dir = dir();
    let (_, server, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let mut echo = EchoServer::start(server).await;
    let mut config = (*client.client_config()).clone();
    config.alpn_protocols.clear();
    let connector = TlsConnector::from(Arc::new(config));
    let (_, err) = refused(&connector, &mut echo).await;
    assert!(
        matches!(err, HandshakeError::NotH2(ref chose) if chose == "none"),
        "{err}"
    );
}

#[tokio::test]
async fn tls_handshake_times_out_on_a_silent_peer() {
    let dir = dir();
    let (_, _, client) = pair(&dir, &["spiffe://test/ns/a/sa/*"], &[PS]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        // Accepts and says nothing, holding the connection open.
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = rx.await;
        drop(tcp);
    });
    tokio::time::pause();
    let err = client.connect(addr, tcp(addr).await).await.unwrap_err();
    assert!(matches!(err, HandshakeError::Timeout), "{err}");
    let _ = tx.send(());
}
