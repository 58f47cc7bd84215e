//! [`TlsContext`]: the rustls configurations built from the `[tls]` files,
//! swapped whole when the files change (the reload module does that), and
//! the bookkeeping of those reloads.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::sign::SingleCertAndKey;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::UnixTime;
use serde::Serialize;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::{info, warn};

use super::identity::PeerPatterns;
use super::material::{self, Files, Material, Paths, TlsError};
use super::settings::TlsSettings;
use super::validity::format_utc;
use super::verify::{ClientIdentityVerifier, ServerIdentityVerifier};

/// The one application protocol sidecars speak to each other.
pub const ALPN_H2: &[u8] = b"h2";

/// Our certificate, key and trusted CAs as rustls configurations for both
/// sides of a sidecar-to-sidecar connection, and the patterns a peer must
/// match. Shared (`Arc`) by every listener and upstream; the configurations
/// are replaced when the files change, while connections made with the
/// previous ones carry on.
pub struct TlsContext {
    pub(super) paths: Paths,
    pub(super) patterns: Arc<PeerPatterns>,
    pub(super) provider: Arc<CryptoProvider>,
    pub(super) reload_every: Duration,
    accept_plaintext: bool,
    current: RwLock<Arc<Current>>,
    pub(super) reload: Mutex<ReloadState>,
}

/// The configurations in use, built from one reading of the files.
pub(super) struct Current {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    pub not_after: i64,
}

impl TlsContext {
    /// Reads and checks the files named by `settings` and builds both
    /// configurations. `settings.mode` is not looked at: the caller loads a
    /// context when TLS is on ([`TlsSettings::enabled`]).
    pub fn load(settings: &TlsSettings) -> Result<TlsContext, TlsError> {
        let (paths, patterns, reload_every) = settings.mutual()?;
        let patterns = Arc::new(patterns);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = paths.read()?;
        let current = build(&files, &paths, &patterns, &provider)?;
        let warned = material::warn_if_expiring(&paths.cert, current.not_after);
        info!(
            cert = %paths.cert.display(),
            not_after = %format_utc(current.not_after),
            peers = ?settings.peer_identities,
            "mutual TLS between sidecars"
        );
        Ok(TlsContext {
            reload: Mutex::new(ReloadState::new(
                files.fingerprint(),
                current.not_after,
                warned,
            )),
            paths,
            patterns,
            provider,
            reload_every,
            accept_plaintext: settings.accept_plaintext,
            current: RwLock::new(Arc::new(current)),
        })
    }

    /// Whether plaintext HTTP/2 callers are forwarded (`tls.accept_plaintext`)
    /// rather than refused.
    pub fn accepts_plaintext(&self) -> bool {
        self.accept_plaintext
    }

    /// An acceptor for the inbound side, with the configuration in use now:
    /// a client certificate is required, chained to the CA bundle and
    /// matching `peer_identities`; ALPN `h2` only; TLS 1.3.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server_config())
    }

    /// A connector for the outbound side, with the configuration in use
    /// now: presents our certificate; the server's must chain to the CA
    /// bundle and match `peer_identities` (whatever address was dialled);
    /// ALPN `h2` only; TLS 1.3.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.client_config())
    }

    /// The server configuration in use now.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current().server.clone()
    }

    /// The client configuration in use now.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.current().client.clone()
    }

    /// The patterns a peer must match.
    pub fn patterns(&self) -> &PeerPatterns {
        &self.patterns
    }

    /// `notAfter` of the certificate in use, in seconds since the epoch.
    pub fn not_after(&self) -> i64 {
        self.current().not_after
    }

    pub(super) fn current(&self) -> Arc<Current> {
        // A panic elsewhere while holding the lock cannot leave a half-made
        // value: the lock only ever guards a whole Arc swap.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn swap(&self, new: Current) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(new);
    }
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("paths", &self.paths)
            .field("patterns", &self.patterns)
            .field("not_after", &format_utc(self.not_after()))
            .finish_non_exhaustive()
    }
}

/// Both configurations from the files' bytes, after every check.
pub(super) fn build(
    files: &Files,
    paths: &Paths,
    patterns: &Arc<PeerPatterns>,
    provider: &Arc<CryptoProvider>,
) -> Result<Current, TlsError> {
    let material = files.parse(paths, provider)?;
    let chain_verifier =
        WebPkiClientVerifier::builder_with_provider(material.roots.clone(), provider.clone())
            .build()
            .map_err(|err| TlsError::Build(rustls::Error::General(err.to_string())))?;
    check_own_chain(&material, &chain_verifier, provider, paths);

    let client_verifier = Arc::new(ClientIdentityVerifier {
        chain: chain_verifier,
        patterns: patterns.clone(),
    });
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Build)?
        .with_client_cert_verifier(client_verifier)
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(material.certified.clone())));
    server.alpn_protocols = vec![ALPN_H2.to_vec()];
    // No resumption: a resumed session skips the certificate checks, so a
    // peer would keep its old identity across a CA change. Sidecar
    // connections live long; a full handshake each time costs nothing.
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;

    let server_verifier = Arc::new(ServerIdentityVerifier {
        roots: material.roots.clone(),
        algorithms: provider.signature_verification_algorithms,
        patterns: patterns.clone(),
    });
    let mut client = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Build)?
        .dangerous()
        .with_custom_certificate_verifier(server_verifier)
        .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(material.certified.clone())));
    client.alpn_protocols = vec![ALPN_H2.to_vec()];
    client.resumption = Resumption::disabled();

    Ok(Current {
        server: Arc::new(server),
        client: Arc::new(client),
        not_after: material.validity.not_after,
    })
}

/// Warns when peers that trust the same CA bundle would refuse our own
/// certificate (issued by another CA, or without the server or client
/// purpose). Not an error: peers may trust a CA we do not.
fn check_own_chain(
    material: &Material,
    client_verifier: &Arc<dyn rustls::server::danger::ClientCertVerifier>,
    provider: &CryptoProvider,
    paths: &Paths,
) {
    let chain = &material.certified.cert;
    let Some((leaf, intermediates)) = chain.split_first() else {
        return;
    };
    let now = UnixTime::now();
    let as_server = rustls::server::ParsedCertificate::try_from(leaf).and_then(|parsed| {
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &material.roots,
            intermediates,
            now,
            provider.signature_verification_algorithms.all,
        )
    });
    let as_client = client_verifier.verify_client_cert(leaf, intermediates, now);
    for (side, result) in [("server", as_server.err()), ("client", as_client.err())] {
        if let Some(err) = result {
            warn!(
                cert = %paths.cert.display(),
                ca = %paths.ca.display(),
                error = %err,
                "peers trusting this CA bundle will refuse our certificate as a TLS {side}"
            );
        }
    }
}

/// What reloads did, for the status API and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadStats {
    /// New files that took effect (the load at start not counted).
    pub successes: u64,
    /// New files refused: the previous configuration stayed.
    pub failures: u64,
    /// `notAfter` of the certificate in use, seconds since the epoch.
    pub not_after_unix: i64,
    /// Why the last refused set was refused.
    pub last_error: Option<String>,
}

/// Reload bookkeeping, behind the context's mutex.
pub(super) struct ReloadState {
    /// The fingerprint of the files last tried (or of the error that
    /// stopped reading them), so a broken set is reported once, not on
    /// every tick, and is tried again as soon as it changes.
    pub(super) tried: u128,
    pub(super) stats: ReloadStats,
    /// The `notAfter` that an expiry warning was given for.
    pub(super) warned_for: Option<i64>,
}

impl ReloadState {
    pub(super) fn new(fingerprint: u128, not_after: i64, warned: bool) -> ReloadState {
        ReloadState {
            tried: fingerprint,
            stats: ReloadStats {
                not_after_unix: not_after,
                ..ReloadStats::default()
            },
            warned_for: warned.then_some(not_after),
        }
    }
}
