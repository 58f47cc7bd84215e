//! `deploy/tls/make-certs.sh` makes files that `TlsContext::load` takes and
//! that two sidecars handshake with; keys in every PEM form load.
//!
//! Needs `openssl`. Without it the tests are skipped, unless `CI` is set:
//! there they fail (`.ci/run` installs the `openssl` package).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use super::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tls/make-certs.sh");

/// Whether openssl can run; panics under CI when it cannot.
fn have_openssl() -> bool {
    let found = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "openssl is not installed: CI must install the openssl package"
        );
        eprintln!("skipped: openssl is not installed");
    }
    found
}

fn make_certs(dir: &Path, names: &[&str], env: &[(&str, &str)]) {
    let out = Command::new(SCRIPT)
        .arg(dir)
        .args(names)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make-certs.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Settings for `name`'s files as the script names them.
fn script_settings(dir: &Path, name: &str, patterns: &[&str]) -> TlsSettings {
    TlsSettings {
        cert: Some(dir.join(format!("{name}.pem"))),
        key: Some(dir.join(format!("{name}-key.pem"))),
        ca: Some(dir.join("ca.pem")),
        ..settings(dir, patterns)
    }
}

fn mode(path: PathBuf) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `openssl pkey -traditional`: PKCS#1 for RSA, SEC1 for EC.
fn traditional(key: &Path, out: &Path) -> String {
    let status = Command::new("openssl")
        .args(["pkey", "-traditional", "-in"])
        .arg(key)
        .arg("-out")
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(out).unwrap()
}

#[tokio::test]
async fn tls_make_certs_script_output_loads_and_handshakes() {
    if !have_openssl() {
        return;
    }
    let dir = dir();
    make_certs(dir.path(), &["ps", "worker-0"], &[]);
    for key in ["ca-key.pem", "ps-key.pem", "worker-0-key.pem"] {
        assert_eq!(mode(dir.path().join(key)), 0o600, "{key}");
    }
    assert_eq!(mode(dir.path().join("ps.pem")), 0o644);

    let ps = TlsContext::load(&script_settings(
        dir.path(),
        "ps",
        &["spiffe://tlc.local/ns/default/sa/*"],
    ))
    .unwrap();
    let worker = TlsContext::load(&script_settings(dir.path(), "worker-0", &["dns:ps"])).unwrap();
    let mut echo = EchoServer::start(Arc::new(ps)).await;
    let (mut stream, server) = worker
        .connect(echo.addr, tcp(echo.addr).await)
        .await
        .unwrap();
    assert_eq!(server.as_str(), "dns:ps");
    assert_eq!(
        echo.next().await.unwrap().as_str(),
        "spiffe://tlc.local/ns/default/sa/worker-0"
    );
    assert_eq!(round_trip(&mut stream, b"hi").await.unwrap(), b"hi");

    // Run again for another name: the CA stays, so old certificates stay valid.
    let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
    make_certs(dir.path(), &["chief"], &[]);
    assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), ca);
    TlsContext::load(&script_settings(dir.path(), "chief", &["dns:ps"])).unwrap();
}

#[test]
fn tls_keys_load_as_pkcs8_pkcs1_and_sec1() {
    if !have_openssl() {
        return;
    }
    let dir = dir();
    let ec = sub(&dir, "ec");
    make_certs(&ec, &["node"], &[]);
    let rsa = sub(&dir, "rsa");
    make_certs(&rsa, &["node"], &[("KEY_TYPE", "rsa")]);
    for (files, header) in [
        (&ec, "-----BEGIN EC PRIVATE KEY-----"),
        (&rsa, "-----BEGIN RSA PRIVATE KEY-----"),
    ] {
        let pkcs8 = script_settings(files, "node", &["dns:node"]);
        let pem = std::fs::read_to_string(files.join("node-key.pem")).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        TlsContext::load(&pkcs8).unwrap();
        let old = files.join("node-traditional.pem");
        let pem = traditional(&files.join("node-key.pem"), &old);
        assert!(pem.starts_with(header), "{pem}");
        let traditional = TlsSettings {
            key: Some(old),
            ..pkcs8
        };
        TlsContext::load(&traditional).unwrap();
    }
}
