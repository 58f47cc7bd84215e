//! Checking a peer sidecar's certificate: its chain against our CA bundle
//! (webpki, with the provider's signature algorithms), then its identity
//! against `tls.peer_identities`. The server name a client dialled plays no
//! part: in transparent mode the outbound side dials an IP address taken
//! from iptables' original destination, which says nothing about who should
//! answer. Who may answer is the identity patterns' job.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, RootCertStore,
    SignatureScheme,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::identity::{IdentityMismatch, PeerPatterns};

/// The rustls error for a certificate no pattern accepts. The mismatch
/// rides inside so that [`super::HandshakeError`] can report it whole.
fn refuse(mismatch: IdentityMismatch) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(mismatch))))
}

/// Server side: webpki's client verifier (client certificate required),
/// then the identity.
#[derive(Debug)]
pub struct ClientIdentityVerifier {
    /// rustls' `WebPkiClientVerifier` over our CA bundle.
    pub chain: Arc<dyn ClientCertVerifier>,
    /// Who may connect.
    pub patterns: Arc<PeerPatterns>,
}

impl ClientCertVerifier for ClientIdentityVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .chain
            .verify_client_cert(end_entity, intermediates, now)?;
        self.patterns.identify(end_entity).map_err(refuse)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// Client side: the server's chain against our CA bundle (for the
/// server-auth purpose, as rustls' own verifier checks it), then its
/// identity instead of the dialled name.
#[derive(Debug)]
pub struct ServerIdentityVerifier {
    /// The CAs trusted for peers.
    pub roots: Arc<RootCertStore>,
    /// The provider's signature verification algorithms.
    pub algorithms: WebPkiSupportedAlgorithms,
    /// Who may answer.
    pub patterns: Arc<PeerPatterns>,
}

impl ServerCertVerifier for ServerIdentityVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        self.patterns.identify(end_entity).map_err(refuse)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
