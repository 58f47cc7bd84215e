//! Admin addresses as the operator writes them (`HOST:PORT`,
//! `http://HOST:PORT`) and as `tlcctl` prints and dials them.

use std::fmt;

/// The port tlcd's admin API listens on unless configured otherwise.
pub const DEFAULT_PORT: u16 = 17000;

/// One tlcd admin API to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `HOST:PORT`, the name every output line uses for this target
    /// (`NAMESPACE/POD` for a pod reached through a port-forward).
    label: String,
    /// `HOST:PORT` to dial: the label, or a port-forward's local end.
    addr: String,
    /// The port, for the token file tlcd writes per port.
    port: u16,
}

impl Target {
    /// `HOST:PORT`, as printed.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the target is this host's loopback (`localhost`,
    /// `127.0.0.0/8`, `[::1]`): only there can tlcctl read the token file
    /// tlcd wrote for itself.
    pub fn is_loopback(&self) -> bool {
        if self.addr != self.label {
            return false;
        }
        let host = self
            .label
            .rsplit_once(':')
            .map_or(self.label.as_str(), |(host, _)| host);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || bare
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The URL of `path` (which starts with `/`) on this target.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A sidecar reached at `addr` (a port-forward's local end) and
    /// named `label` in every output line. Never taken for a loopback
    /// target: tlcd's own token file on this host is not its.
    pub fn forwarded(label: String, addr: String) -> Target {
        Target {
            label,
            addr,
            port: DEFAULT_PORT,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// Parses `--admin` and each comma-separated part of `TLC_ADMIN`.
///
/// Only the syntax is checked; whether anything answers is the request's
/// business. A missing port means the default one, so `--admin pod-a`
/// works like `--admin pod-a:17000`.
pub fn parse(text: &str) -> Result<Target, String> {
    let text = text.trim();
    let rest = match text.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
            "{text}: only http:// is supported (tlcd's admin API is plain HTTP), not {scheme}://"
        ))
        }
        None => text,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err("an admin address is empty; expected HOST:PORT".to_string());
    }
    if authority.contains(['/', '?', '#', '@']) || authority.contains(char::is_whitespace) {
        return Err(format!(
            "{text}: expected HOST:PORT or http://HOST:PORT, without a path"
        ));
    }
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| format!("{text}: expected HOST:PORT (an IPv6 host goes in brackets)"))?;
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("{text}: port {port:?} is not a number from 1 to 65535"))?,
    };
    Ok(Target {
        label: format!("{host}:{port}"),
        addr: format!("{host}:{port}"),
        port,
    })
}

/// Splits `host[:port]` or `[v6][:port]`; `None` for an unbracketed IPv6
/// address, whose last group cannot be told from a port.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let host = &authority[..=end];
        if host.len() == 2 {
            return None;
        }
        return match &authority[end + 1..] {
            "" => Some((host, None)),
            rest => rest.strip_prefix(':').map(|port| (host, Some(port))),
        };
    }
    match authority.matches(':').count() {
        0 => Some((authority, None)),
        1 => {
            let (host, port) = authority.split_once(':')?;
            (!host.is_empty()).then_some((host, Some(port)))
        }
        _ => None,
    }
}

/// Drops repeated targets, keeping the first of each, so one sidecar named
/// twice is asked once.
pub fn dedup(targets: Vec<Target>) -> Vec<Target> {
    let mut unique: Vec<Target> = Vec::with_capacity(targets.len());
    for target in targets {
        if !unique.contains(&target) {
            unique.push(target);
        }
    }
    unique
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(text: &str) -> String {
        parse(text).map(|t| t.label).unwrap_or_else(|e| e)
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(label("127.0.0.1:17000"), "127.0.0.1:17000");
        assert_eq!(label("http://127.0.0.1:17001/"), "127.0.0.1:17001");
        assert_eq!(label("HTTP://pod-a:9"), "pod-a:9");
        assert_eq!(label(" pod-a "), "pod-a:17000");
        assert_eq!(label("[::1]:15002"), "[::1]:15002");
        assert_eq!(label("[::1]"), "[::1]:17000");
        assert_eq!(
            parse("pod:1").map(|t| t.url("/v1/status")),
            Ok("http://pod:1/v1/status".to_string())
        );
    }

    #[test]
    fn refused_forms() {
        for bad in [
            "",
            "https://pod:1",
            "pod:1/v1",
            "pod:x",
            "pod:0",
            "pod:70000",
            "::1",
            ":17000",
            "[]:1",
            "[::1]x",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(label("https://pod:1").contains("only http://"));
    }

    #[test]
    fn loopback_targets() {
        for local in [
            "127.0.0.1:1",
            "localhost",
            "LocalHost:9",
            "[::1]:17000",
            "127.3.2.1",
        ] {
            assert!(parse(local).is_ok_and(|t| t.is_loopback()), "{local}");
        }
        for remote in ["10.0.0.1:1", "pod-a", "[fd00::1]:1", "localhost.example"] {
            assert!(parse(remote).is_ok_and(|t| !t.is_loopback()), "{remote}");
        }
        assert_eq!(parse("pod-a").map(|t| t.port()), Ok(DEFAULT_PORT));
    }

    #[test]
    fn dedup_keeps_order() {
        let targets = ["b:1", "a:1", "b:1"]
            .iter()
            .map(|t| parse(t))
            .collect::<Result<Vec<_>, _>>()
            .map(dedup)
            .map(|ts| ts.iter().map(|t| t.label.clone()).collect::<Vec<_>>());
        assert_eq!(targets, Ok(vec!["b:1".to_string(), "a:1".to_string()]));
    }
}
