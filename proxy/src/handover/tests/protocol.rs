//! The pure parsers: what they accept, what they refuse and why.

use super::*;

fn entry(purpose: &str, addr: &str) -> String {
    format!(r#"{{"purpose":"{purpose}","addr":"{addr}"}}"#)
}

fn manifest(entries: &[String]) -> Vec<u8> {
    format!(r#"{{"version":1,"listeners":[{}]}}"#, entries.join(",")).into_bytes()
}

fn error(line: &[u8]) -> String {
    Manifest::parse(line).expect_err("refused").to_string()
}

#[test]
fn a_manifest_reads_and_writes_back() {
    let line = manifest(&[
        entry("route", "127.0.0.1:4322"),
        entry("admin", "[::1]:9090"),
        entry("metrics", "0.0.0.0:9100"),
    ]);
    let parsed = Manifest::parse(&line).expect("a manifest");
    let want: Vec<ManifestEntry> = [
        (Purpose::Route, "127.0.0.1:4322"),
        (Purpose::Admin, "[::1]:9090"),
        (Purpose::Metrics, "0.0.0.0:9100"),
    ]
    .iter()
    .map(|(purpose, addr)| ManifestEntry {
        purpose: *purpose,
        addr: addr.parse().expect("an address"),
    })
    .collect();
    assert_eq!(parsed.listeners, want);
    let written = parsed.to_line();
    assert_eq!(written.last(), Some(&b'\n'));
    assert_eq!(Manifest::parse(&written).expect("reads back"), parsed);
    // Unknown fields are a later version's additions, ignored.
    let extra = br#"{"version":1,"listeners":[],"draining":true}"#;
    assert_eq!(Manifest::parse(extra).expect("read"), Manifest::default());
}

#[test]
fn bad_manifests_are_refused_with_the_reason() {
    assert!(error(b"{\"version\":1,").starts_with("bad manifest: not a JSON object"));
    assert!(error(b"[1,2]").starts_with("bad manifest: not a JSON object"));
    let unknown = error(&manifest(&[entry("proxy", "127.0.0.1:1")]));
    assert!(unknown.contains("unknown variant `proxy`"), "{unknown}");
    let no_port = error(&manifest(&[entry("route", "127.0.0.1")]));
    assert!(
        no_port.starts_with("bad manifest: not a JSON object"),
        "{no_port}"
    );
    let many: Vec<String> = (0..=MAX_LISTENERS)
        .map(|i| entry("route", &format!("127.0.0.1:{}", 1000 + i)))
        .collect();
    assert_eq!(
        error(&manifest(&many)),
        "bad manifest: 65 listeners, at most 64 are handed over"
    );
    assert_eq!(
        Manifest::parse(&manifest(&many[..MAX_LISTENERS]))
            .expect("64 are fine")
            .listeners
            .len(),
        64
    );
    let twice = manifest(&[entry("route", "127.0.0.1:1"), entry("admin", "127.0.0.1:1")]);
    assert_eq!(error(&twice), "bad manifest: 127.0.0.1:1 is listed twice");
    assert!(error(br#"{"version":2,"listeners":[]}"#)
        .starts_with("the manifest is of hand-over version 2, this tlcd speaks version 1"));
    assert_eq!(
        error(br#"{"listeners":[]}"#),
        "bad manifest: no \"version\""
    );
    assert_eq!(error(br#"{"version":1}"#), "bad manifest: no \"listeners\"");
    assert_eq!(
        error(&vec![b' '; MAX_LINE + 1]),
        "the manifest is longer than 65536 bytes"
    );
    // A refusal, of whatever version.
    let refusal = Manifest::refusal_line("busy");
    assert_eq!(refusal, b"{\"version\":1,\"refused\":\"busy\"}\n");
    assert_eq!(
        error(br#"{"version":7,"refused":"busy"}"#),
        "the running tlcd refused to hand over its listeners: busy"
    );
}

#[test]
fn hellos_and_ready_lines() {
    let hello = Hello::current();
    assert_eq!(hello.pid, std::process::id());
    let line = hello.to_line();
    assert!(line.starts_with(br#"{"hello":"tlcd-handover","version":1,"pid":"#));
    assert_eq!(Hello::parse(&line).expect("reads back"), hello);

    let long = format!(
        r#"{{"hello":"tlcd-handover","version":1,"pid":1,"tlcd":"{}"}}"#,
        "9".repeat(65)
    );
    let err = Hello::parse(long.as_bytes()).expect_err("long").to_string();
    assert_eq!(
        err,
        "bad hello: its \"tlcd\" version is longer than 64 bytes"
    );
    let err = Hello::parse(br#"{"hello":"tlcd-handover","version":1,"tlcd":"0.1.0"}"#)
        .expect_err("no pid")
        .to_string();
    assert_eq!(err, "bad hello: no \"pid\"");

    assert_eq!(
        Ready::parse(b"{\"ready\":true}\n").expect("ready"),
        Ready::Serving
    );
    assert_eq!(Ready::Serving.to_line(), b"{\"ready\":true}\n");
    let failed = Ready::Failed("port taken".into());
    assert_eq!(Ready::parse(&failed.to_line()).expect("read"), failed);
    let clipped = Ready::Failed("x".repeat(5000)).to_line();
    match Ready::parse(&clipped).expect("read") {
        Ready::Failed(why) => {
            assert_eq!(why.len(), crate::handover::protocol::MAX_REASON);
            assert!(why.ends_with("x…"), "{why}");
        }
        Ready::Serving => panic!("not ready"),
    }
    assert!(Ready::parse(b"{}").is_err());
    assert!(Ready::parse(b"{\"ready\":1}").is_err());
}
