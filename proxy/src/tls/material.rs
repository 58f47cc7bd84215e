//! Reading the three files of `[tls]` (our chain, our key, the CAs trusted
//! for peers) and turning them into what rustls needs, with errors that
//! name the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tracing::warn;

use super::validity::{self, format_utc, Validity};
use tlc_core::ConfigError;

/// How close to its expiry our certificate is before tlcd warns.
pub const EXPIRY_WARNING_SECONDS: i64 = 7 * 86_400;

/// Why the TLS files cannot be used. Each error names the file.
#[derive(Debug, Error)]
pub enum TlsError {
    /// The `[tls]` table is incomplete or wrong.
    #[error(transparent)]
    Settings(#[from] ConfigError),
    /// A file could not be read (missing, no permission).
    #[error("cannot read {what} file {path}: {source}")]
    Read {
        /// Which file it is: certificate, private key, CA bundle.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not valid PEM.
    #[error("{path}: not a valid PEM {what} file: {source}")]
    Pem {
        /// Which file it is.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        source: pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error(
        "{path}: no certificate in it (expected PEM \"BEGIN CERTIFICATE\" blocks, ours first)"
    )]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error(
        "{path}: no private key in it (expected PEM \"BEGIN PRIVATE KEY\", \
         \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\")"
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key is PEM but not a key rustls can sign with.
    #[error("{path}: unusable private key: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
    /// The key is not the one the certificate was issued for.
    #[error(
        "private key {key} does not belong to the certificate {cert} (their public keys differ)"
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A certificate that is not valid X.509.
    #[error("{path}: certificate #{index} cannot be parsed: {message}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Its position in the file, from 0.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The CA file holds no certificate.
    #[error("{path}: no CA certificate in it (expected PEM \"BEGIN CERTIFICATE\" blocks)")]
    EmptyCa {
        /// The file.
        path: PathBuf,
    },
    /// A CA certificate that cannot be a trust anchor.
    #[error("{path}: CA certificate #{index} cannot be used as a trust anchor: {message}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// Its position in the file, from 0.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Our certificate is past its `notAfter`.
    #[error("{path}: the certificate expired at {not_after} (it is now {now}); renew it")]
    Expired {
        /// The certificate file.
        path: PathBuf,
        /// Its `notAfter`, UTC.
        not_after: String,
        /// The time now, UTC.
        now: String,
    },
    /// rustls refused the configuration built from valid files.
    #[error("cannot build the TLS configuration: {0}")]
    Build(rustls::Error),
}

/// Where the three files are.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Our certificate chain.
    pub cert: PathBuf,
    /// Our private key.
    pub key: PathBuf,
    /// The CAs trusted for peers.
    pub ca: PathBuf,
}

/// The bytes of the three files, as read at one moment.
pub struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

/// What the files hold, checked.
pub struct Material {
    /// Our chain and signing key.
    pub certified: Arc<CertifiedKey>,
    /// The CAs trusted for peers.
    pub roots: Arc<RootCertStore>,
    /// When our certificate is valid.
    pub validity: Validity,
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

impl Paths {
    /// Reads the three files. Following symbolic links is what makes a
    /// Kubernetes Secret volume work: it swaps a `..data` link to rotate.
    pub fn read(&self) -> Result<Files, TlsError> {
        Ok(Files {
            cert: read("certificate", &self.cert)?,
            key: read("private key", &self.key)?,
            ca: read("CA bundle", &self.ca)?,
        })
    }
}

impl Files {
    /// A hash of the three files' contents, to notice a change. Not a
    /// security measure: a change only makes tlcd check the files again.
    pub fn fingerprint(&self) -> u128 {
        let mut bytes = Vec::with_capacity(self.cert.len() + self.key.len() + self.ca.len() + 24);
        for part in [&self.cert, &self.key, &self.ca] {
            bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
            bytes.extend_from_slice(part);
        }
        xxhash_rust::xxh3::xxh3_128(&bytes)
    }

    /// Parses and checks the files: a chain and the key that belongs to
    /// its first certificate, not expired; at least one usable CA.
    pub fn parse(&self, paths: &Paths, provider: &CryptoProvider) -> Result<Material, TlsError> {
        let chain = certificates(&self.cert, "certificate", &paths.cert)?;
        let Some(leaf) = chain.first() else {
            return Err(TlsError::NoCertificate {
                path: paths.cert.clone(),
            });
        };
        for (index, cert) in chain.iter().enumerate() {
            webpki::EndEntityCert::try_from(cert).map_err(|err| TlsError::Certificate {
                path: paths.cert.clone(),
                index,
                message: err.to_string(),
            })?;
        }
        let validity = validity::of(leaf).ok_or_else(|| TlsError::Certificate {
            path: paths.cert.clone(),
            index: 0,
            message: "its validity period cannot be read".into(),
        })?;
        let now = validity::now();
        if validity.not_after < now {
            return Err(TlsError::Expired {
                path: paths.cert.clone(),
                not_after: format_utc(validity.not_after),
                now: format_utc(now),
            });
        }
        if validity.not_before > now {
            // Not refused: a certificate issued a moment ago by a host whose
            // clock runs ahead becomes valid soon, and peers judge by their
            // own clocks anyway.
            warn!(
                cert = %paths.cert.display(),
                not_before = %format_utc(validity.not_before),
                "TLS certificate is not valid yet; peers will refuse it until then"
            );
        }
        let key = match PrivateKeyDer::from_pem_slice(&self.key) {
            Ok(key) => key,
            Err(pem::Error::NoItemsFound) => {
                return Err(TlsError::NoKey {
                    path: paths.key.clone(),
                })
            }
            Err(source) => {
                return Err(TlsError::Pem {
                    what: "private key",
                    path: paths.key.clone(),
                    source,
                })
            }
        };
        let signing_key = provider
            .key_provider
            .load_private_key(key)
            .map_err(|source| TlsError::Key {
                path: paths.key.clone(),
                source,
            })?;
        let certified = CertifiedKey::new(chain, signing_key);
        match certified.keys_match() {
            // Unknown: the provider cannot tell (no ring key type does this).
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => {
                return Err(TlsError::KeyMismatch {
                    cert: paths.cert.clone(),
                    key: paths.key.clone(),
                })
            }
            Err(err) => {
                return Err(TlsError::Certificate {
                    path: paths.cert.clone(),
                    index: 0,
                    message: err.to_string(),
                })
            }
        }
        let roots = roots(&self.ca, &paths.ca)?;
        Ok(Material {
            certified: Arc::new(certified),
            roots: Arc::new(roots),
            validity,
        })
    }
}

/// Every certificate in a PEM file, in order.
fn certificates(
    bytes: &[u8],
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what,
            path: path.to_owned(),
            source,
        })
}

fn roots(bytes: &[u8], path: &Path) -> Result<RootCertStore, TlsError> {
    let certs = certificates(bytes, "CA bundle", path)?;
    if certs.is_empty() {
        return Err(TlsError::EmptyCa {
            path: path.to_owned(),
        });
    }
    let mut roots = RootCertStore::empty();
    for (index, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|err| TlsError::Ca {
            path: path.to_owned(),
            index,
            // rustls words this for a peer ("invalid peer certificate");
            // only the cause applies to a CA file.
            message: match err {
                rustls::Error::InvalidCertificate(cause) => format!("{cause:?}"),
                other => other.to_string(),
            },
        })?;
    }
    Ok(roots)
}

/// Warns when our certificate expires within [`EXPIRY_WARNING_SECONDS`].
/// Returns whether it did.
pub fn warn_if_expiring(cert: &Path, not_after: i64) -> bool {
    let left = not_after - validity::now();
    if left >= EXPIRY_WARNING_SECONDS {
        return false;
    }
    warn!(
        cert = %cert.display(),
        not_after = %format_utc(not_after),
        hours_left = left / 3600,
        "TLS certificate expires soon; renew it (tlcd picks up the new files by itself)"
    );
    true
}
