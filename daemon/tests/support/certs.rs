//! Certificates and `[tls]` settings for tests of mutual TLS between
//! sidecars, made by the project's own script (`deploy/tls/make-certs.sh`,
//! which needs openssl): the identity a certificate named `NAME` carries is
//! `spiffe://tlc.local/ns/default/sa/NAME`.

use std::path::Path;
use std::process::Command;

use tlc_proxy::tls::{TlsMode, TlsSettings};

/// The identity of the certificate named `worker`.
pub const WORKER: &str = "spiffe://tlc.local/ns/default/sa/worker";
/// The identity of the certificate named `ps`.
pub const PS: &str = "spiffe://tlc.local/ns/default/sa/ps";

/// Certificates for `names` under a new CA in `dir`.
pub fn make_certs(dir: &Path, names: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tls/make-certs.sh");
    let status = Command::new("bash")
        .arg(script)
        .arg(dir)
        .args(names)
        .status()
        .expect("bash");
    assert!(
        status.success(),
        "make-certs.sh failed (is openssl installed?)"
    );
}

/// Mutual TLS with the certificate `name` in `dir`, trusting `peers`;
/// plaintext callers refused (the default).
pub fn tls(dir: &Path, name: &str, peers: &[&str]) -> TlsSettings {
    TlsSettings {
        mode: TlsMode::Mutual,
        cert: Some(dir.join(format!("{name}.pem"))),
        key: Some(dir.join(format!("{name}-key.pem"))),
        ca: Some(dir.join("ca.pem")),
        peer_identities: peers.iter().map(|p| p.to_string()).collect(),
        reload_seconds: 10,
        accept_plaintext: false,
    }
}
