//! The `[tls]` table read through the whole configuration: defaults, the
//! file, the environment, and errors that name the key.

use crate::config::layers::Layers;
use crate::config::Config;

use std::path::Path;

use tlc_proxy::tls::TlsSettings;

const MUTUAL: &str = r#"
    [tls]
    mode = "mutual"
    cert = "/etc/tlc/tls/tls.crt"
    key = "/etc/tlc/tls/tls.key"
    ca = "/etc/tlc/tls/ca.crt"
    peer_identities = ["spiffe://cluster.local/ns/training/sa/*", "dns:*.tf.svc"]
"#;

#[test]
fn tls_defaults_to_off() {
    let config = Config::from_toml("").unwrap();
    assert_eq!(config.tls, TlsSettings::default());
    assert!(!config.tls.enabled());
    assert_eq!(config.tls.reload_seconds, 10);
}

#[test]
fn tls_mutual_with_secret_file_names() {
    let config = Config::from_toml(MUTUAL).unwrap();
    assert!(config.tls.enabled());
    assert_eq!(
        config.tls.cert.as_deref(),
        Some(Path::new("/etc/tlc/tls/tls.crt"))
    );
    assert_eq!(config.tls.patterns().unwrap().patterns().len(), 2);
}

#[test]
fn tls_validation_errors_name_key_value_and_what_is_allowed() {
    let cases = [
        (
            "[tls]\nmode = \"mutual\"\n",
            "tls.cert = unset: a PEM certificate chain file; required when tls.mode = \"mutual\"",
        ),
        (
            "[tls]\nmode = \"mutual\"\ncert = \"c\"\nkey = \"k\"\n",
            "tls.ca = unset: a PEM file of CA certificates; required when tls.mode = \"mutual\"",
        ),
        (
            "[tls]\nmode = \"mutual\"\ncert = \"c\"\nkey = \"\"\nca = \"a\"\n",
            "tls.key = unset: a PEM private key file; required when tls.mode = \"mutual\"",
        ),
        (
            "[tls]\nmode = \"mutual\"\ncert = \"c\"\nkey = \"k\"\nca = \"a\"\n",
            "tls.peer_identities = []: at least one pattern when tls.mode = \"mutual\", \
             e.g. [\"spiffe://cluster.local/ns/training/sa/*\"]",
        ),
        (
            "[tls]\nreload_seconds = 0\n",
            "tls.reload_seconds = 0: 1 to 3600 seconds",
        ),
        (
            "[tls]\nreload_seconds = 3601\n",
            "tls.reload_seconds = 3601: 1 to 3600 seconds",
        ),
        (
            // Checked even with TLS off.
            "[tls]\npeer_identities = [\"dns:a.b\", \"spiffe://td/sa/w*\"]\n",
            "tls.peer_identities[1] = spiffe://td/sa/w*: \"*\" must be a whole path segment \
             (it matches exactly one path segment)",
        ),
        (
            "[tls]\npeer_identities = [\"worker.svc\"]\n",
            "tls.peer_identities[0] = worker.svc: a pattern starts with spiffe:// \
             (a URI SAN) or dns: (a DNS SAN)",
        ),
    ];
    for (text, want) in cases {
        let err = Config::from_toml(text).unwrap_err();
        assert_eq!(err.to_string(), want, "{text}");
    }
    let err = Config::from_toml("[tls]\nmode = \"strict\"\n").unwrap_err();
    assert!(err.to_string().contains("strict"), "{err}");
    let err = Config::from_toml("[tls]\ncertificate = \"c\"\n").unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
}

#[test]
fn tls_from_the_environment() {
    let layers = Layers::with_env(&[
        ("TLC_TLS__MODE", "mutual"),
        ("TLC_TLS__CERT", "/s/tls.crt"),
        ("TLC_TLS__KEY", "/s/tls.key"),
        ("TLC_TLS__CA", "/s/ca.crt"),
        (
            "TLC_TLS__PEER_IDENTITIES",
            "spiffe://td/ns/a/sa/*,dns:*.tf.svc",
        ),
        ("TLC_TLS__RELOAD_SECONDS", "30"),
    ]);
    let config = layers.resolve().unwrap().config;
    assert!(config.tls.enabled());
    assert_eq!(config.tls.ca.as_deref(), Some(Path::new("/s/ca.crt")));
    assert_eq!(
        config.tls.peer_identities,
        vec!["spiffe://td/ns/a/sa/*", "dns:*.tf.svc"]
    );
    assert_eq!(config.tls.reload_seconds, 30);
}
