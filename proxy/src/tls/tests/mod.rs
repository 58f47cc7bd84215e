//! Real TLS over loopback TCP between [`TlsContext`]s made from files that
//! rcgen writes in each test: the helpers here, the cases by subject.

mod handshake;
mod load;
mod reload;
mod script;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration, OffsetDateTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{HandshakeError, PeerIdentity, TlsContext, TlsMode, TlsSettings};

/// The SPIFFE ID of the client in most tests.
pub const WORKER: &str = "spiffe://test/ns/a/sa/worker";
/// The SPIFFE ID of the server in most tests.
pub const PS: &str = "spiffe://test/ns/a/sa/ps";

/// A certificate authority made for one test.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// A leaf certificate and its key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf valid from an hour ago for 30 days, for both TLS purposes.
    pub fn leaf(&self, uris: &[&str], dns: &[&str]) -> Leaf {
        let now = OffsetDateTime::now_utc();
        self.leaf_valid(
            uris,
            dns,
            now - Duration::hours(1),
            now + Duration::days(30),
        )
    }

    pub fn leaf_valid(
        &self,
        uris: &[&str],
        dns: &[&str],
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Leaf {
        let mut params = CertificateParams::default();
        let name = uris.first().or(dns.first()).copied().unwrap_or("leaf");
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI(u.to_string().try_into().unwrap()))
            .chain(
                dns.iter()
                    .map(|d| SanType::DnsName(d.to_string().try_into().unwrap())),
            )
            .collect();
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

impl Leaf {
    /// The leaf as rustls presents it, for raw configurations that
    /// `TlsContext::load` would refuse to build (an expired certificate).
    pub fn certified(&self) -> Arc<CertifiedKey> {
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        Arc::new(CertifiedKey::from_der(vec![self.der.clone()], key, &provider).unwrap())
    }
}

/// Writes `ca.crt`, `tls.crt` and `tls.key` (a Kubernetes TLS Secret's
/// names) into `dir`.
pub fn write_files(dir: &Path, ca_pem: &str, leaf: &Leaf) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
    std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &leaf.key_pem).unwrap();
}

/// Mutual-mode settings for the files in `dir`.
pub fn settings(dir: &Path, patterns: &[&str]) -> TlsSettings {
    TlsSettings {
        mode: TlsMode::Mutual,
        cert: Some(dir.join("tls.crt")),
        key: Some(dir.join("tls.key")),
        ca: Some(dir.join("ca.crt")),
        peer_identities: patterns.iter().map(|p| p.to_string()).collect(),
        reload_seconds: 1,
        accept_plaintext: false,
    }
}

/// A context made from `leaf`, trusting `ca_pem`, accepting `patterns`.
pub fn context(dir: &Path, ca_pem: &str, leaf: &Leaf, patterns: &[&str]) -> Arc<TlsContext> {
    write_files(dir, ca_pem, leaf);
    Arc::new(TlsContext::load(&settings(dir, patterns)).unwrap())
}

/// A TLS echo server: each accepted connection's handshake result goes to
/// `results`, then what it reads it writes back.
pub struct EchoServer {
    pub addr: SocketAddr,
    pub results: mpsc::UnboundedReceiver<Result<PeerIdentity, HandshakeError>>,
}

impl EchoServer {
    /// Handshakes with [`TlsContext::accept`].
    pub async fn start(context: Arc<TlsContext>) -> EchoServer {
        EchoServer::start_with(context, false).await
    }

    /// Handshakes with the bare [`TlsContext::acceptor`], so that what its
    /// verifier refuses is seen without `accept`'s own checks after it.
    pub async fn start_bare(context: Arc<TlsContext>) -> EchoServer {
        EchoServer::start_with(context, true).await
    }

    async fn start_with(context: Arc<TlsContext>, bare: bool) -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, results) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let context = context.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let accepted = if bare {
                        match context.acceptor().accept(tcp).await {
                            Ok(stream) => match context.peer_identity(stream.get_ref().1) {
                                Some(identity) => Ok((stream, identity)),
                                None => panic!("the acceptor let in a peer of no identity"),
                            },
                            Err(err) => Err(HandshakeError::from(err)),
                        }
                    } else {
                        context.accept(tcp).await
                    };
                    match accepted {
                        Ok((stream, identity)) => {
                            let _ = tx.send(Ok(identity));
                            echo(stream).await;
                        }
                        Err(err) => {
                            let _ = tx.send(Err(err));
                        }
                    }
                });
            }
        });
        EchoServer { addr, results }
    }

    /// The next handshake's result on the server side.
    pub async fn next(&mut self) -> Result<PeerIdentity, HandshakeError> {
        tokio::time::timeout(std::time::Duration::from_secs(10), self.results.recv())
            .await
            .expect("no handshake on the server within 10 s")
            .expect("server stopped")
    }
}

async fn echo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Sends `message` on `stream` and reads as many bytes back.
pub async fn round_trip<S>(stream: &mut S, message: &[u8]) -> std::io::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(message).await?;
    stream.flush().await?;
    let mut back = vec![0u8; message.len()];
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_exact(&mut back),
    )
    .await
    .map_err(|_| std::io::Error::other("no echo within 10 s"))??;
    Ok(back)
}

/// A TCP connection to `addr`.
pub async fn tcp(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// A directory for one test's files.
pub fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// `dir/name`.
pub fn sub(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}
