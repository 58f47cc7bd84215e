//! For the metrics tests: a strict reader of the OpenMetrics text format,
//! a plain HTTP/1.0 GET, a sidecar's metrics endpoint, and a requester →
//! holder sidecar pair.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use tlc_core::Role;
use tlc_proxy::Proxy;
use tlc_sidecar::policy::{CodecSettings, Policy, PolicySettings};
use tlc_sidecar::Sidecar;

use super::Client;

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// One metric family: its metadata and its samples, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: Option<String>,
    pub unit: Option<String>,
    pub samples: Vec<Sample>,
}

/// A whole exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Exposition {
    pub families: Vec<Family>,
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The suffixes a sample of a family of `kind` may add to the family name.
fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "gauge" | "unknown" => &[""],
        "histogram" => &["_bucket", "_sum", "_count", "_created"],
        "info" => &["_info"],
        _ => &[],
    }
}

/// A float as the format writes one.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse::<f64>()
            .map_err(|_| format!("bad number {text:?}")),
    }
}

/// `name{a="x",b="y"} value` (labels optional); nothing after the value.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("sample without a value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            if !labels.is_empty() {
                rest = rest
                    .strip_prefix(',')
                    .ok_or("labels not separated by ','")?;
            }
            let eq = rest.find('=').ok_or("label without '='")?;
            let label = &rest[..eq];
            if !is_label_name(label) {
                return Err(format!("bad label name {label:?}"));
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err("unterminated label value".into()),
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        Some((_, 'n')) => value.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some((_, '\n')) => return Err("newline in a label value".into()),
                    Some((_, c)) => value.push(c),
                }
            };
            rest = &rest[end + 1..];
            if labels.insert(label.to_string(), value).is_some() {
                return Err(format!("label {label} twice"));
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or("no single space before the value")?;
    if value.contains(' ') {
        return Err(format!("unexpected text after the value: {value:?}"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value: parse_value(value)?,
    })
}

/// One histogram series: buckets (le, count), `_count`, whether `_sum` is there.
#[derive(Default)]
struct Group(Vec<(f64, f64)>, Option<f64>, bool);

/// Checks one histogram family: per label set (without `le`), buckets in
/// increasing `le`, cumulative, the last at `+Inf`, and `_count` equal to
/// it, with a `_sum`.
fn check_histogram(family: &Family) -> Result<(), String> {
    let name = &family.name;
    let mut groups: BTreeMap<Vec<(String, String)>, Group> = BTreeMap::new();
    for sample in &family.samples {
        let mut key: Vec<(String, String)> = sample
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        key.sort();
        let group = groups.entry(key).or_default();
        let suffix = &sample.name[name.len()..];
        match suffix {
            "_bucket" => {
                let le = sample
                    .labels
                    .get("le")
                    .ok_or_else(|| format!("{name}: bucket without le"))?;
                group.0.push((parse_value(le)?, sample.value));
            }
            "_count" => group.1 = Some(sample.value),
            "_sum" => group.2 = true,
            _ => {}
        }
    }
    for (labels, Group(buckets, count, has_sum)) in groups {
        let at = format!("{name}{labels:?}");
        if buckets.is_empty() {
            return Err(format!("{at}: no buckets"));
        }
        for pair in buckets.windows(2) {
            if pair[0].0 >= pair[1].0 {
                return Err(format!("{at}: le {} then {}", pair[0].0, pair[1].0));
            }
            if pair[0].1 > pair[1].1 {
                return Err(format!(
                    "{at}: buckets not cumulative ({} then {})",
                    pair[0].1, pair[1].1
                ));
            }
        }
        let (last_le, last) = buckets[buckets.len() - 1];
        if last_le != f64::INFINITY {
            return Err(format!("{at}: last bucket is le={last_le}, not +Inf"));
        }
        if count != Some(last) {
            return Err(format!(
                "{at}: _count {count:?} is not the +Inf bucket {last}"
            ));
        }
        if !has_sum {
            return Err(format!("{at}: no _sum"));
        }
        if buckets.iter().any(|(_, n)| n.fract() != 0.0 || *n < 0.0) {
            return Err(format!("{at}: a bucket count is not a whole number"));
        }
    }
    Ok(())
}

impl Exposition {
    /// Parses `text` strictly: every line is metadata or a sample of the
    /// family declared last, every family has a `# TYPE`, and the text ends
    /// with `# EOF`. No NaN anywhere, counters non-negative and finite.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let body = text
            .strip_suffix("# EOF\n")
            .ok_or("the text does not end with \"# EOF\\n\"")?;
        let mut families: Vec<Family> = Vec::new();
        let mut seen_families = HashSet::new();
        let mut seen_samples = HashSet::new();
        // A HELP waits for the TYPE of the same family, which must follow.
        let mut pending_help: Option<(String, String)> = None;
        for (number, line) in body.lines().enumerate() {
            let at = |e: String| format!("line {}: {e}: {line:?}", number + 1);
            if line.is_empty() {
                return Err(at("empty line".into()));
            }
            if let Some(meta) = line.strip_prefix("# ") {
                let mut parts = meta.splitn(3, ' ');
                let keyword = parts.next().unwrap_or_default();
                let name = parts
                    .next()
                    .ok_or_else(|| at("metadata without a name".into()))?;
                let rest = parts.next().unwrap_or_default();
                if keyword != "TYPE" && pending_help.is_some() {
                    return Err(at("HELP not followed by its TYPE".into()));
                }
                match keyword {
                    "HELP" => pending_help = Some((name.to_string(), rest.to_string())),
                    "TYPE" => {
                        if !is_metric_name(name) {
                            return Err(at(format!("bad family name {name:?}")));
                        }
                        if suffixes(rest).is_empty() {
                            return Err(at(format!("unknown type {rest:?}")));
                        }
                        if !seen_families.insert(name.to_string()) {
                            return Err(at(format!("family {name} declared twice")));
                        }
                        let help = match pending_help.take() {
                            Some((of, text)) if of == name => Some(text),
                            Some((of, _)) => return Err(at(format!("HELP of {of} before it"))),
                            None => None,
                        };
                        families.push(Family {
                            name: name.to_string(),
                            kind: rest.to_string(),
                            help,
                            unit: None,
                            samples: Vec::new(),
                        });
                    }
                    "UNIT" => match families.last_mut() {
                        Some(f) if f.name == name && f.samples.is_empty() => {
                            if !name.ends_with(&format!("_{rest}")) {
                                return Err(at(format!("unit {rest} is not a suffix of {name}")));
                            }
                            f.unit = Some(rest.to_string());
                        }
                        _ => return Err(at("UNIT not right after its family's TYPE".into())),
                    },
                    _ => return Err(at(format!("unknown metadata {keyword:?}"))),
                }
                continue;
            }
            if pending_help.is_some() {
                return Err(at("HELP not followed by its TYPE".into()));
            }
            if line.starts_with('#') {
                return Err(at("comment that is not metadata".into()));
            }
            let sample = parse_sample(line).map_err(at)?;
            let family = families
                .last_mut()
                .ok_or_else(|| at("sample before any # TYPE".into()))?;
            let suffix = sample
                .name
                .strip_prefix(family.name.as_str())
                .ok_or_else(|| at(format!("sample outside its family {}", family.name)))?;
            if !suffixes(&family.kind).contains(&suffix) {
                return Err(at(format!(
                    "suffix {suffix:?} not allowed for a {} ({})",
                    family.kind, family.name
                )));
            }
            if sample.value.is_nan() {
                return Err(at("NaN".into()));
            }
            if family.kind == "counter"
                && suffix == "_total"
                && !(sample.value >= 0.0 && sample.value.is_finite())
            {
                return Err(at("counter not a finite non-negative number".into()));
            }
            if !seen_samples.insert(format!("{}{:?}", sample.name, sample.labels)) {
                return Err(at("the same series twice".into()));
            }
            family.samples.push(sample);
        }
        if let Some((name, _)) = pending_help {
            return Err(format!("HELP of {name} without a TYPE"));
        }
        for family in families.iter().filter(|f| f.kind == "histogram") {
            check_histogram(family)?;
        }
        Ok(Exposition { families })
    }

    /// The family named `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// Every sample named `name` whose labels include `labels`.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The sum of the samples [`Exposition::samples`] finds (0 if none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).iter().map(|s| s.value).sum()
    }

    /// The value of the one sample named `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<_> = self
            .samples(name, labels)
            .into_iter()
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert!(found.len() <= 1, "{name}{labels:?} matches {found:?}");
        found.first().map(|s| s.value)
    }
}

/// A finished HTTP/1.0 exchange.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `method target` over a fresh connection with HTTP/1.0 (the server
/// closes it after the answer), blocking, 10 s timeouts.
pub fn http(addr: SocketAddr, method: &str, target: &str) -> std::io::Result<HttpAnswer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "{method} {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("no status line"))?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(HttpAnswer {
        status,
        headers,
        body: body.to_string(),
    })
}

/// A GET, see [`http`].
pub fn get(addr: SocketAddr, target: &str) -> std::io::Result<HttpAnswer> {
    http(addr, "GET", target)
}

/// `sidecar`'s metrics endpoint, served on a free loopback port until
/// [`MetricsEndpoint::stop`].
pub struct MetricsEndpoint {
    /// Where it listens.
    pub addr: SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl MetricsEndpoint {
    /// Serves `sidecar`'s metrics on a free loopback port.
    pub async fn start(sidecar: Arc<Sidecar>) -> MetricsEndpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(tlc_daemon::metrics::serve(
            listener,
            sidecar,
            shutdown.clone(),
        ));
        MetricsEndpoint {
            addr,
            shutdown,
            server,
        }
    }

    /// Stops serving: the server must end within 5 seconds.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.server)
            .await
            .unwrap()
            .unwrap();
    }
}

/// A requester sidecar → holder sidecar → server chain, as TensorFlow's
/// worker would see it: `client` talks to the requester's outbound
/// listener.
pub struct Pair {
    pub requester: Arc<Sidecar>,
    pub holder: Arc<Sidecar>,
    pub client: Client,
    _proxies: (Proxy<Sidecar>, Proxy<Sidecar>),
}

/// A holder-side sidecar with `settings` as its policy (checked).
pub fn holder_with(settings: &PolicySettings) -> Arc<Sidecar> {
    Arc::new(Sidecar::new(
        Policy::new(settings).unwrap(),
        Default::default(),
        None,
    ))
}

/// A holder-side sidecar that compresses tensors no graph classified, as
/// fp16 (`[policy.unknown] codec = "fp16"`; by default they pass
/// unchanged): for tests of what becomes of a compressed response, without
/// a graph to teach.
pub fn compressing_unclassified() -> Arc<Sidecar> {
    holder_with(&PolicySettings {
        unknown: CodecSettings {
            codec: "fp16".into(),
            ..CodecSettings::default()
        },
        ..super::compressing_settings()
    })
}

/// A [`Pair`] in front of `server`, with `holder` on the holding side.
pub async fn pair(server: SocketAddr, holder: Arc<Sidecar>) -> Pair {
    let inbound = super::proxy(Role::Inbound, server, holder.clone()).await;
    let requester = Arc::new(super::compressing_sidecar());
    let outbound = super::proxy(Role::Outbound, inbound.local_addrs()[0], requester.clone()).await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    Pair {
        requester,
        holder,
        client,
        _proxies: (outbound, inbound),
    }
}

/// A rendezvous key from task `src` to task `dst` for node `node`.
pub fn key(src: &str, dst: &str, edge: u32, node: &str) -> String {
    format!("{src};0000000000000001;{dst};edge_{edge}_{node};0:0")
}
