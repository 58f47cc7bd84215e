//! What `TlsContext::load` says about files it cannot use.

use super::*;
use crate::tls::TlsError;

/// A CA, a good leaf, and its files in `dir`.
fn good_files(dir: &Path) -> (Ca, Leaf) {
    let ca = Ca::new("test CA");
    let leaf = ca.leaf(&[WORKER], &["worker.test"]);
    write_files(dir, &ca.pem, &leaf);
    (ca, leaf)
}

fn load_error(dir: &Path) -> TlsError {
    match TlsContext::load(&settings(dir, &[PS])) {
        Ok(_) => panic!("loaded files that should be refused"),
        Err(err) => err,
    }
}

/// Writes `contents` into `file` in `dir`: loading must then fail, naming
/// the file and saying `what`. The error, for the caller to match.
fn refused(
    dir: &tempfile::TempDir,
    file: &str,
    contents: impl AsRef<[u8]>,
    what: &str,
) -> TlsError {
    let dir = dir.path();
    std::fs::write(dir.join(file), contents).unwrap();
    let err = load_error(dir);
    assert_names(&err, dir, file, what);
    err
}

/// Asserts `err` names `file` in `dir` and says `what`.
fn assert_names(err: &TlsError, dir: &Path, file: &str, what: &str) {
    let text = err.to_string();
    assert!(
        text.contains(&dir.join(file).display().to_string()),
        "{text}"
    );
    assert!(text.contains(what), "{text}");
}

#[test]
fn tls_load_reads_secret_file_names_and_reports_not_after() {
    let dir = dir();
    let ca = Ca::new("test CA");
    let now = time::OffsetDateTime::now_utc();
    let not_after = (now + time::Duration::days(90))
        .replace_nanosecond(0)
        .unwrap();
    let leaf = ca.leaf_valid(&[WORKER], &[], now - time::Duration::hours(1), not_after);
    write_files(dir.path(), &ca.pem, &leaf);
    let context = TlsContext::load(&settings(dir.path(), &[PS])).unwrap();
    assert_eq!(context.not_after(), not_after.unix_timestamp());
    let stats = context.reload_stats();
    assert_eq!(stats.not_after_unix, not_after.unix_timestamp());
    assert_eq!((stats.successes, stats.failures), (0, 0));
}

#[test]
fn tls_load_refuses_missing_files() {
    let dir = dir();
    good_files(dir.path());
    std::fs::remove_file(dir.path().join("tls.key")).unwrap();
    let err = load_error(dir.path());
    assert!(
        matches!(
            err,
            TlsError::Read {
                what: "private key",
                ..
            }
        ),
        "{err}"
    );
    assert_names(&err, dir.path(), "tls.key", "cannot read private key file");
}

#[test]
fn tls_load_refuses_a_file_without_certificate() {
    let dir = dir();
    let (_, leaf) = good_files(dir.path());
    // The key where the certificate should be: a common slip.
    let err = refused(&dir, "tls.crt", &leaf.key_pem, "no certificate in it");
    assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
}

#[test]
fn tls_load_refuses_a_file_without_key() {
    let dir = dir();
    let (_, leaf) = good_files(dir.path());
    let err = refused(&dir, "tls.key", &leaf.cert_pem, "no private key in it");
    assert!(matches!(err, TlsError::NoKey { .. }), "{err}");
}

#[test]
fn tls_load_refuses_a_key_of_another_certificate() {
    let dir = dir();
    let (ca, _) = good_files(dir.path());
    let other = ca.leaf(&[WORKER], &[]);
    let err = refused(
        &dir,
        "tls.key",
        &other.key_pem,
        "does not belong to the certificate",
    );
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");
    assert_names(&err, dir.path(), "tls.crt", "their public keys differ");
}

#[test]
fn tls_load_refuses_unparsable_files() {
    let dir = dir();
    let (_, leaf) = good_files(dir.path());
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
    let err = refused(&dir, "tls.crt", broken, "not a valid PEM certificate file");
    assert!(
        matches!(
            err,
            TlsError::Pem {
                what: "certificate",
                ..
            }
        ),
        "{err}"
    );

    // Valid PEM around bytes that are not a certificate.
    let junk = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
    let err = refused(&dir, "tls.crt", junk, "certificate #0 cannot be parsed");
    assert!(
        matches!(err, TlsError::Certificate { index: 0, .. }),
        "{err}"
    );

    std::fs::write(dir.path().join("tls.crt"), &leaf.cert_pem).unwrap();
    let junk_key = "-----BEGIN PRIVATE KEY-----\naGVsbG8gd29ybGQ=\n-----END PRIVATE KEY-----\n";
    let err = refused(&dir, "tls.key", junk_key, "unusable private key");
    assert!(matches!(err, TlsError::Key { .. }), "{err}");
}

#[test]
fn tls_load_refuses_an_empty_or_bad_ca_bundle() {
    let dir = dir();
    let (ca, _) = good_files(dir.path());
    let err = refused(
        &dir,
        "ca.crt",
        "# rotated away\n",
        "no CA certificate in it",
    );
    assert!(matches!(err, TlsError::EmptyCa { .. }), "{err}");

    let junk = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
    let err = refused(
        &dir,
        "ca.crt",
        format!("{}{junk}", ca.pem),
        "CA certificate #1 cannot be used as a trust anchor",
    );
    assert!(matches!(err, TlsError::Ca { index: 1, .. }), "{err}");
}

#[test]
fn tls_load_refuses_an_expired_certificate() {
    let dir = dir();
    let ca = Ca::new("test CA");
    let expired = ca.leaf_valid(
        &[WORKER],
        &[],
        rcgen::date_time_ymd(2020, 1, 1),
        rcgen::date_time_ymd(2021, 1, 1),
    );
    write_files(dir.path(), &ca.pem, &expired);
    let err = load_error(dir.path());
    assert!(matches!(err, TlsError::Expired { .. }), "{err}");
    assert_names(
        &err,
        dir.path(),
        "tls.crt",
        "the certificate expired at 2021-01-01T00:00:00Z",
    );
}

#[test]
fn tls_load_checks_the_settings() {
    let dir = dir();
    good_files(dir.path());
    let mut incomplete = settings(dir.path(), &[PS]);
    incomplete.ca = None;
    let err = TlsContext::load(&incomplete).err().unwrap();
    assert!(err.to_string().starts_with("tls.ca = unset"), "{err}");
    let mut busy = settings(dir.path(), &[PS]);
    busy.reload_seconds = 0;
    let err = TlsContext::load(&busy).err().unwrap();
    assert!(
        err.to_string().starts_with("tls.reload_seconds = 0"),
        "{err}"
    );
}
