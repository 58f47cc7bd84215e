//! Who a peer sidecar is: the patterns of `tls.peer_identities`, and the
//! identity its certificate's subject alternative names (SANs) present.
//!
//! # Pattern syntax
//!
//! A pattern is one of two forms.
//!
//! **URI** (SPIFFE IDs): `spiffe://TRUST_DOMAIN/SEGMENT/SEGMENT/...`
//! - `TRUST_DOMAIN` is literal: one or more of `a-z 0-9 . - _`. It is the
//!   trust boundary, so it never holds a wildcard.
//! - The path is one or more segments after the trust domain, each either
//!   `*` or one or more of `A-Z a-z 0-9 . - _` (not `.` or `..`). No empty
//!   segment, no trailing `/`, no query or fragment.
//! - A certificate's URI SAN matches when its scheme and trust domain equal
//!   the pattern's ignoring ASCII case (URI schemes and hosts are
//!   case-insensitive), it has exactly as many path segments, and each
//!   segment equals the pattern's exactly (paths are case-sensitive) or the
//!   pattern's segment is `*`. A `*` matches exactly one whole segment of the
//!   characters above: `sa/*` matches `sa/worker` but not `sa/a/b` nor
//!   `sa/`; `sa/work*` is not a pattern (no partial-segment wildcards).
//!
//! **DNS**: `dns:LABEL.LABEL...`
//! - Each label is `*` or 1 to 63 of `A-Z a-z 0-9 - _`; the name is at most
//!   253 characters and has at least one literal label.
//! - A certificate's DNS SAN matches when it has exactly as many labels and
//!   each equals the pattern's ignoring ASCII case (DNS is
//!   case-insensitive) or the pattern's label is `*`, which matches exactly
//!   one whole non-empty label: `dns:*.tf.svc` matches `ps-0.tf.svc`, not
//!   `a.ps-0.tf.svc` nor `tf.svc`.
//! - A DNS SAN that is itself a wildcard (`*.tf.svc`) never identifies a
//!   peer: it names a set of hosts, not one sidecar.
//!
//! The identity of a peer is its first SAN that matches any pattern, URI
//! SANs before DNS SANs, written as the SAN (`spiffe://…`) or as `dns:` and
//! the lowercased name.

use std::fmt;

use rustls_pki_types::CertificateDer;
use thiserror::Error;

/// A pattern of `tls.peer_identities` that was not understood, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatternError {
    /// Neither `spiffe://` nor `dns:`.
    #[error("a pattern starts with spiffe:// (a URI SAN) or dns: (a DNS SAN)")]
    UnknownForm,
    /// The trust domain of a URI pattern is empty or has other characters.
    #[error("the trust domain after spiffe:// is one or more of a-z 0-9 . - _ (no wildcard)")]
    TrustDomain,
    /// A URI pattern without a path.
    #[error("a SPIFFE ID pattern needs a path after the trust domain, e.g. spiffe://cluster.local/ns/training/sa/*")]
    NoPath,
    /// A path segment or DNS label that holds `*` among other characters.
    #[error("\"*\" must be a whole {0} (it matches exactly one {0})")]
    PartialWildcard(&'static str),
    /// An empty segment or label (`//`, `..`, a trailing separator).
    #[error("empty {0} (no \"//\", \"..\" or trailing separator)")]
    Empty(&'static str),
    /// A segment or label with a character it cannot hold.
    #[error("{0} {1:?} holds a character other than {2}")]
    Character(&'static str, String, &'static str),
    /// A path segment `.` or `..`.
    #[error("path segment {0:?} is not allowed")]
    DotSegment(String),
    /// A DNS label longer than 63 characters or a name over 253.
    #[error("DNS labels are at most 63 characters and names at most 253")]
    TooLong,
    /// `dns:*` or `dns:*.*`: every label a wildcard.
    #[error(
        "at least one label must be literal (a pattern of wildcards alone would accept any name)"
    )]
    OnlyWildcards,
}

/// One segment of a URI path or one label of a DNS name in a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `*`: exactly one whole segment or label.
    Any,
    /// This text exactly (DNS labels are stored lowercased).
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    Uri {
        trust_domain: String,
        path: Vec<Part>,
    },
    Dns {
        labels: Vec<Part>,
    },
}

/// One entry of `tls.peer_identities`, parsed. See the module documentation
/// for the syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityPattern {
    text: String,
    form: Form,
}

const URI_SCHEME: &str = "spiffe://";
const DNS_PREFIX: &str = "dns:";
const SEGMENT_CHARS: &str = "A-Z a-z 0-9 . - _";
const LABEL_CHARS: &str = "A-Z a-z 0-9 - _";

fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

fn is_trust_domain_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_')
}

/// A presented URI path segment that `*` may stand for.
fn is_segment(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".." && segment.chars().all(is_segment_char)
}

impl IdentityPattern {
    /// Parses one pattern.
    pub fn parse(text: &str) -> Result<IdentityPattern, PatternError> {
        let form = if let Some(rest) = text.strip_prefix(URI_SCHEME) {
            parse_uri(rest)?
        } else if let Some(rest) = text.strip_prefix(DNS_PREFIX) {
            parse_dns(rest)?
        } else {
            return Err(PatternError::UnknownForm);
        };
        Ok(IdentityPattern {
            text: text.to_string(),
            form,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a certificate's URI SAN matches this pattern.
    pub fn matches_uri(&self, uri: &str) -> bool {
        let Form::Uri { trust_domain, path } = &self.form else {
            return false;
        };
        let Some(rest) = strip_prefix_ignore_case(uri, URI_SCHEME) else {
            return false;
        };
        let Some((authority, presented)) = rest.split_once('/') else {
            return false;
        };
        authority.eq_ignore_ascii_case(trust_domain)
            && parts_match(
                path,
                presented.split('/'),
                |want, got| want == got,
                is_segment,
            )
    }

    /// Whether a certificate's DNS SAN matches this pattern.
    pub fn matches_dns(&self, name: &str) -> bool {
        let Form::Dns { labels } = &self.form else {
            return false;
        };
        if name.contains('*') {
            return false;
        }
        parts_match(
            labels,
            name.split('.'),
            |want, got| want.eq_ignore_ascii_case(got),
            |label| !label.is_empty(),
        )
    }
}

impl fmt::Display for IdentityPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Pattern parts against presented parts: same count, each equal or `*`
/// over a part that `any` accepts.
fn parts_match<'a>(
    want: &[Part],
    got: impl Iterator<Item = &'a str>,
    equal: impl Fn(&str, &str) -> bool,
    any: impl Fn(&str) -> bool,
) -> bool {
    let mut got = got;
    for part in want {
        let Some(presented) = got.next() else {
            return false;
        };
        let ok = match part {
            Part::Any => any(presented),
            Part::Exact(text) => equal(text, presented),
        };
        if !ok {
            return false;
        }
    }
    got.next().is_none()
}

fn parse_uri(rest: &str) -> Result<Form, PatternError> {
    let (trust_domain, path) = rest.split_once('/').unwrap_or((rest, ""));
    if trust_domain.is_empty() || !trust_domain.chars().all(is_trust_domain_char) {
        return Err(PatternError::TrustDomain);
    }
    if path.is_empty() {
        return Err(PatternError::NoPath);
    }
    let path = path
        .split('/')
        .map(|segment| {
            if segment == "*" {
                Ok(Part::Any)
            } else if segment.is_empty() {
                Err(PatternError::Empty("path segment"))
            } else if segment.contains('*') {
                Err(PatternError::PartialWildcard("path segment"))
            } else if segment == "." || segment == ".." {
                Err(PatternError::DotSegment(segment.to_string()))
            } else if !segment.chars().all(is_segment_char) {
                Err(PatternError::Character(
                    "path segment",
                    segment.to_string(),
                    SEGMENT_CHARS,
                ))
            } else {
                Ok(Part::Exact(segment.to_string()))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Form::Uri {
        trust_domain: trust_domain.to_string(),
        path,
    })
}

fn parse_dns(name: &str) -> Result<Form, PatternError> {
    if name.len() > 253 {
        return Err(PatternError::TooLong);
    }
    let labels = name
        .split('.')
        .map(|label| {
            if label == "*" {
                Ok(Part::Any)
            } else if label.is_empty() {
                Err(PatternError::Empty("DNS label"))
            } else if label.contains('*') {
                Err(PatternError::PartialWildcard("DNS label"))
            } else if label.len() > 63 {
                Err(PatternError::TooLong)
            } else if !label.chars().all(is_label_char) {
                Err(PatternError::Character(
                    "DNS label",
                    label.to_string(),
                    LABEL_CHARS,
                ))
            } else {
                Ok(Part::Exact(label.to_ascii_lowercase()))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if labels.iter().all(|label| *label == Part::Any) {
        return Err(PatternError::OnlyWildcards);
    }
    Ok(Form::Dns { labels })
}

/// The identity a peer was accepted as: the SAN of its certificate that
/// matched `tls.peer_identities` (`spiffe://…`, or `dns:` and the name).
/// For logs and metrics labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerIdentity(String);

impl PeerIdentity {
    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A peer certificate that no pattern accepts. It travels inside rustls'
/// error during the handshake; [`super::HandshakeError`] takes it out.
#[derive(Debug, Clone, Error)]
#[error("peer certificate names {presented} and none matches tls.peer_identities [{patterns}]")]
pub struct IdentityMismatch {
    /// The certificate's URI and DNS SANs, comma-separated (`none` if it has none).
    pub presented: String,
    /// The patterns, comma-separated.
    pub patterns: String,
}

/// The patterns a peer must match, as the verifiers use them.
#[derive(Debug, Clone)]
pub struct PeerPatterns(Vec<IdentityPattern>);

impl PeerPatterns {
    /// Parses every pattern; the index of a bad one comes with its error.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<PeerPatterns, (usize, PatternError)> {
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| IdentityPattern::parse(text.as_ref()).map_err(|err| (i, err)))
            .collect::<Result<Vec<_>, _>>()
            .map(PeerPatterns)
    }

    /// The patterns.
    pub fn patterns(&self) -> &[IdentityPattern] {
        &self.0
    }

    /// The identity `certificate` (a peer's end-entity certificate,
    /// already verified against the CA bundle) presents, if any pattern
    /// accepts one of its SANs.
    pub fn identify(
        &self,
        certificate: &CertificateDer<'_>,
    ) -> Result<PeerIdentity, IdentityMismatch> {
        let names = match webpki::EndEntityCert::try_from(certificate) {
            Ok(cert) => {
                let uris: Vec<String> = cert.valid_uri_names().map(str::to_string).collect();
                let dns: Vec<String> = cert.valid_dns_names().map(str::to_string).collect();
                for uri in &uris {
                    if self.0.iter().any(|p| p.matches_uri(uri)) {
                        return Ok(PeerIdentity(uri.clone()));
                    }
                }
                for name in &dns {
                    if self.0.iter().any(|p| p.matches_dns(name)) {
                        return Ok(PeerIdentity(format!(
                            "{DNS_PREFIX}{}",
                            name.to_ascii_lowercase()
                        )));
                    }
                }
                uris.into_iter()
                    .chain(dns.into_iter().map(|name| format!("{DNS_PREFIX}{name}")))
                    .collect()
            }
            // The chain check parsed it already; this cannot normally happen.
            Err(_) => Vec::new(),
        };
        Err(IdentityMismatch {
            presented: if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
            patterns: self
                .0
                .iter()
                .map(IdentityPattern::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> IdentityPattern {
        IdentityPattern::parse(text).unwrap()
    }

    #[test]
    fn uri_wildcard_is_one_whole_segment() {
        let p = pattern("spiffe://trust.domain/ns/training/sa/*");
        assert!(p.matches_uri("spiffe://trust.domain/ns/training/sa/worker"));
        assert!(p.matches_uri("spiffe://trust.domain/ns/training/sa/ps-0"));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/training/sa/"));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/training/sa/a/b"));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/training/sa"));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/other/sa/worker"));
        assert!(!p.matches_uri("spiffe://other.domain/ns/training/sa/worker"));
        assert!(!p.matches_uri("spiffe://trust.domain.evil/ns/training/sa/worker"));
        assert!(!p.matches_uri("spiffe://user@trust.domain/ns/training/sa/worker"));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/training/sa/.."));
        assert!(!p.matches_uri("spiffe://trust.domain/ns/training/sa/w?x"));
        assert!(!p.matches_uri("https://trust.domain/ns/training/sa/worker"));
        assert!(!p.matches_dns("trust.domain"));
        let mid = pattern("spiffe://td/ns/*/sa/worker");
        assert!(mid.matches_uri("spiffe://td/ns/training/sa/worker"));
        assert!(!mid.matches_uri("spiffe://td/ns/training/sa/worker2"));
    }

    #[test]
    fn uri_case_rules() {
        let p = pattern("spiffe://td.local/ns/Training/sa/worker");
        assert!(p.matches_uri("SPIFFE://TD.local/ns/Training/sa/worker"));
        assert!(!p.matches_uri("spiffe://td.local/ns/training/sa/worker"));
    }

    #[test]
    fn no_partial_segment_or_label_wildcards() {
        assert_eq!(
            IdentityPattern::parse("spiffe://td/sa/work*"),
            Err(PatternError::PartialWildcard("path segment"))
        );
        assert_eq!(
            IdentityPattern::parse("dns:w*.tf.svc"),
            Err(PatternError::PartialWildcard("DNS label"))
        );
        assert_eq!(
            IdentityPattern::parse("spiffe://*/sa/worker"),
            Err(PatternError::TrustDomain)
        );
    }

    #[test]
    fn malformed_patterns() {
        let bad = [
            ("spiffe://td", PatternError::NoPath),
            ("spiffe://td/", PatternError::NoPath),
            ("spiffe://td/ns//sa", PatternError::Empty("path segment")),
            ("spiffe://td/ns/", PatternError::Empty("path segment")),
            ("spiffe://td/ns/..", PatternError::DotSegment("..".into())),
            ("spiffe://TD/ns", PatternError::TrustDomain),
            ("spiffe:///ns", PatternError::TrustDomain),
            (
                "spiffe://td/ns?x",
                PatternError::Character("path segment", "ns?x".into(), SEGMENT_CHARS),
            ),
            ("dns:", PatternError::Empty("DNS label")),
            ("dns:a..b", PatternError::Empty("DNS label")),
            ("dns:a.b.", PatternError::Empty("DNS label")),
            ("dns:*", PatternError::OnlyWildcards),
            ("dns:*.*", PatternError::OnlyWildcards),
            (
                "dns:a b.c",
                PatternError::Character("DNS label", "a b".into(), LABEL_CHARS),
            ),
            ("worker.tf.svc", PatternError::UnknownForm),
            ("https://td/ns", PatternError::UnknownForm),
            ("DNS:a.b", PatternError::UnknownForm),
        ];
        for (text, err) in bad {
            assert_eq!(IdentityPattern::parse(text), Err(err), "{text}");
        }
        let long = format!("dns:{}.svc", "a".repeat(64));
        assert_eq!(IdentityPattern::parse(&long), Err(PatternError::TooLong));
    }

    #[test]
    fn dns_wildcard_is_one_whole_label() {
        let p = pattern("dns:*.tf.training.svc.cluster.local");
        assert!(p.matches_dns("ps-0.tf.training.svc.cluster.local"));
        assert!(!p.matches_dns("a.ps-0.tf.training.svc.cluster.local"));
        assert!(!p.matches_dns("tf.training.svc.cluster.local"));
        assert!(!p.matches_dns(".tf.training.svc.cluster.local"));
        assert!(!p.matches_dns("ps-0.tf.training.svc.cluster.local.evil"));
        // A wildcard SAN names many hosts, never one peer.
        assert!(!p.matches_dns("*.tf.training.svc.cluster.local"));
        assert!(!p.matches_uri("spiffe://ps-0.tf.training.svc.cluster.local/x"));
    }

    #[test]
    fn dns_ignores_case() {
        let p = pattern("dns:Worker-0.TF.svc");
        assert!(p.matches_dns("worker-0.tf.svc"));
        assert!(p.matches_dns("WORKER-0.tf.SVC"));
        assert!(!p.matches_dns("worker-1.tf.svc"));
    }
}
