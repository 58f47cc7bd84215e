//! What two sidecars tell each other, in HTTP/2 headers of the calls they
//! carry. TensorFlow never sees these: the sidecar next to it adds them on
//! the way out and removes them on the way in.
//!
//! | header | on | meaning |
//! |---|---|---|
//! | `tlc-peer: 1` | request | a sidecar sent this call and decodes envelopes of version 1 |
//! | `tlc-replica: EPOCH-VERSION` | request | for pulls: the requester's replica of this tensor (epoch in hex) |
//! | `tlc-class: CLASS[;fn][;accumulated]` | request | what the requester's sidecar learned of the tensor from a graph (`dense_read`, `dense_gradient`, `sparse`, `unknown`); `;fn` if from a TF2 function, whose contexts are named by the whole tensor name; `;accumulated` for a gradient collected by an accumulator (synchronous training: no refinement) |
//! | `tlc-max: BYTES` | request | the largest tensor content (decimal bytes) the requester decodes; a larger one must come uncompressed |
//! | `tlc-envelope: 1` | response | the response's `tensor_content` is an envelope, not the tensor |
//! | `tlc-fallback: TOKEN` | request to [`FALLBACK_PATH`] | asks for the original response of an envelope |
//! | `tlc-rows: EPOCH-VERSION-BYTES` | request | for gathered rows and gradient rows the graph pairs with their ids: the requester decodes row-keyed envelopes; for gathered rows, the rows it holds (epoch in hex, `0-0` for none) and the most bytes of rows it keeps for the tensor |
//! | `tlc-entropy: zstd` | request | the requester reads frames with the entropy stage (`codec/FORMAT.md`) |
//! | `tlc-compact: 1` | request | the requester reads envelopes in their compact form ([`crate::compact`], `wire/ENVELOPE.md`): the holder's sidecar sends them so |
//! | `tlc-keyframe: int8` | request | the requester reads a tensor's first keyframe as an int8 frame (`wire/ENVELOPE.md`) |
//! | `tlc-hop: 1` | request | the caller is a sidecar that restores hop-compressed responses ([`crate::hop`]); with `grpc-encoding: zstd`, this request's messages are hop-compressed |
//! | `tlc-hop-ref: ID` | request | hop-compressed against the earlier request `ID` (hex), which the holder's sidecar keeps |
//! | `tlc-hop-miss: 1` | response | the holder's sidecar no longer keeps the `tlc-hop-ref` request: send it again without |
//! | `tlc-hop-again: 1` | response | the holder's sidecar could not hold this hop-compressed request (in-flight budget or `limits.gather_seconds`) and answered `UNIMPLEMENTED` as TensorFlow answers an unknown encoding: send it again uncompressed |
//! | `tlc-hop: 1` | response | a sidecar answered; with `grpc-encoding: zstd`, the response's messages are hop-compressed |
//! | `tlc-ids: 1` | request | for a tensor of row ids: the requester restores ids sent again as a reference to ids of the same step it already received |
//! | `tlc-ids-again: TOKEN-HASH-NAME` | response | the response's `tensor_content` is left out: it is the ids of tensor `NAME` of the same step and requester, whose xxh3-64 is `HASH` (hex); `TOKEN` (hex) fetches the original |
//! | `tlc-hop-paths: 1` | response | the answering sidecar restores short method paths ([`crate::short_path`]): the requester may send them |
//! | `tlc-link: RATE-DECODE` | request | what the requester measured: the rate the holder's answers arrive at (bytes per second) and its decode cost (picoseconds per raw byte), decimal; `0` for either where not known yet |
//! | `tlc-mirror: 1` | request | the requester checks what it restores against the holder's hash (`[policy.check] mirror`) |
//! | `tlc-mirror: HASH` | response | xxh3-64 (hex) of the f32 content the requester should hand TensorFlow from this envelope |
//! | `tlc-agree: A` | request | for a gradient, the requester's measure of how much the workers' pushes of this tensor agree (decimal, −1 to 1: the mean over recent rounds of the pushes' pairwise agreement); absent where it measures none, which the holder's fidelity controller takes as agreeing |
//! | `tlc-ack: TOKEN,...` | request | envelopes the requester restored since its last call to this holder (fallback tokens in hex, at most [`MAX_ACKS`]): their originals are no longer needed |

use http::{HeaderMap, HeaderValue};

use tlc_core::TensorClass;

/// Request header: the caller is a sidecar.
pub const PEER: &str = "tlc-peer";
/// Request header: the caller's replica state for the tensor.
pub const REPLICA: &str = "tlc-replica";
/// Request header: the tensor's class, as the requester's graph says.
pub const CLASS: &str = "tlc-class";
/// Request header: the largest tensor content the requester decodes.
pub const MAX_TENSOR: &str = "tlc-max";
/// Response header: tensor bytes are an envelope.
pub const ENVELOPE: &str = "tlc-envelope";
/// Request header of a fallback call: which response is wanted.
pub const FALLBACK: &str = "tlc-fallback";
/// Request header: the earlier request this one is compressed against.
pub const HOP_REF: &str = "tlc-hop-ref";
/// Response header: the `tlc-hop-ref` request is no longer kept.
pub const HOP_MISS: &str = "tlc-hop-miss";
/// Response header: a hop-compressed request was refused for want of
/// memory or time; send it again uncompressed.
pub const HOP_AGAIN: &str = "tlc-hop-again";
/// Request header: the requester reads frames with the entropy stage.
pub const ENTROPY: &str = "tlc-entropy";
/// Request header: the requester reads compact envelopes
/// ([`crate::compact`]).
pub const COMPACT: &str = "tlc-compact";
/// Request header: the requester reads int8 first keyframes.
pub const KEYFRAME: &str = "tlc-keyframe";
/// Request header: the requester decodes row-keyed envelopes, and holds
/// these rows.
pub const ROWS: &str = "tlc-rows";
/// Request and response header: a sidecar on the other end of the hop
/// restores hop-compressed messages ([`crate::hop`]).
pub const HOP: &str = "tlc-hop";
/// Request header: the requester restores ids sent again by reference.
pub const IDS: &str = "tlc-ids";
/// Response header: the ids are those of an earlier tensor of the step.
pub const IDS_AGAIN: &str = "tlc-ids-again";
/// Response header: the holder's sidecar restores short method paths
/// ([`crate::short_path`]).
pub const HOP_PATHS: &str = "tlc-hop-paths";
/// Request header: the link rate and decode cost the requester measured.
pub const LINK: &str = "tlc-link";
/// Request header: fallback tokens of envelopes the requester restored.
pub const ACK: &str = "tlc-ack";
/// Request header: the requester checks what it restores; response
/// header: the hash to check it against.
pub const MIRROR: &str = "tlc-mirror";
/// Request header: how much the workers' gradients of this tensor agree,
/// as the requester measured them.
pub const AGREE: &str = "tlc-agree";
/// Most tokens one `tlc-ack` carries (the rest wait for the next call, or
/// for the cache's own bound).
pub const MAX_ACKS: usize = 64;
/// The envelope version this build speaks.
pub const PROTOCOL: &str = "1";
/// gRPC path of the sidecar-to-sidecar fallback call; answered by the
/// sidecar itself, never forwarded to TensorFlow.
pub const FALLBACK_PATH: &str = "/tlc.Sidecar/Fallback";

/// A requester's replica of one tensor, as far as the holder needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaHeader {
    /// Epoch of the holder sidecar the replica was built from.
    pub epoch: u64,
    /// Version of the replica.
    pub version: u64,
}

impl ReplicaHeader {
    /// `EPOCH-VERSION`, epoch in hex.
    pub fn to_header(self) -> HeaderValue {
        // Hex digits, a dash and decimal digits: always a valid header value.
        HeaderValue::try_from(format!("{:x}-{}", self.epoch, self.version))
            .unwrap_or_else(|_| HeaderValue::from_static("0-0"))
    }

    /// Parses `EPOCH-VERSION`; anything else is `None` (treated as no replica).
    pub fn parse(value: &HeaderValue) -> Option<ReplicaHeader> {
        let text = value.to_str().ok()?;
        let (epoch, version) = text.split_once('-')?;
        Some(ReplicaHeader {
            epoch: u64::from_str_radix(epoch, 16).ok()?,
            version: version.parse().ok()?,
        })
    }
}

/// A requester's rows of one row-keyed tensor, as far as the holder needs
/// to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsHeader {
    /// Epoch of the holder's mirror the rows were built from; 0 for none.
    pub epoch: u64,
    /// Version of the rows; 0 for none.
    pub version: u64,
    /// The most bytes of rows the requester keeps for this tensor.
    pub max_bytes: u64,
}

impl RowsHeader {
    /// `EPOCH-VERSION-BYTES`, epoch in hex.
    pub fn to_header(self) -> HeaderValue {
        HeaderValue::try_from(format!(
            "{:x}-{}-{}",
            self.epoch, self.version, self.max_bytes
        ))
        .unwrap_or_else(|_| HeaderValue::from_static("0-0-0"))
    }

    /// Parses `EPOCH-VERSION-BYTES`; anything else is `None` (no rows
    /// spoken).
    pub fn parse(value: &HeaderValue) -> Option<RowsHeader> {
        let mut parts = value.to_str().ok()?.split('-');
        let epoch = u64::from_str_radix(parts.next()?, 16).ok()?;
        let version = parts.next()?.parse().ok()?;
        let max_bytes = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(RowsHeader {
            epoch,
            version,
            max_bytes,
        })
    }
}

/// Ids sent again: which earlier ids of the step a response's tensor
/// holds, and how to fetch the original if the requester has not got them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdsAgainHeader {
    /// The holder's fallback token for the original response.
    pub token: u64,
    /// `rows::ids_hash` of the ids.
    pub hash: u64,
    /// The rendezvous tensor name of the earlier ids.
    pub tensor: String,
}

/// Longest tensor name an `IdsAgainHeader` carries.
const MAX_IDS_TENSOR_NAME: usize = 1024;

impl IdsAgainHeader {
    /// `TOKEN-HASH-NAME`, the numbers in hex; `None` for a name HTTP
    /// cannot carry or longer than a header takes.
    pub fn to_header(&self) -> Option<HeaderValue> {
        if self.tensor.is_empty() || self.tensor.len() > MAX_IDS_TENSOR_NAME {
            return None;
        }
        HeaderValue::try_from(format!("{:x}-{:x}-{}", self.token, self.hash, self.tensor)).ok()
    }

    /// Parses `TOKEN-HASH-NAME` (1 to 16 hex digits each, a name of 1 to
    /// 1024 bytes, which may hold `-`); anything else is `None`.
    pub fn parse(value: &HeaderValue) -> Option<IdsAgainHeader> {
        let mut parts = value.to_str().ok()?.splitn(3, '-');
        let hex = |text: &str| {
            let ok = (1..=16).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit());
            ok.then(|| u64::from_str_radix(text, 16).ok()).flatten()
        };
        let token = hex(parts.next()?)?;
        let hash = hex(parts.next()?)?;
        let tensor = parts.next()?;
        if tensor.is_empty() || tensor.len() > MAX_IDS_TENSOR_NAME {
            return None;
        }
        Some(IdsAgainHeader {
            token,
            hash,
            tensor: tensor.to_owned(),
        })
    }
}

/// What a requester announced of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassHint {
    /// The class its graph gave the tensor.
    pub class: TensorClass,
    /// Whether the graph was a TF2 function body.
    pub function: bool,
    /// Whether the graph collects the gradient in an accumulator
    /// (synchronous training).
    pub accumulated: bool,
    /// Whether an adaptive optimizer (Adam, Adagrad, RMSProp...) applies
    /// the gradient on the requester's task.
    pub adaptive: bool,
}

/// The class a requester announced, if it is one this build knows.
pub fn class(headers: &HeaderMap) -> Option<ClassHint> {
    let value = headers.get(CLASS)?.to_str().ok()?;
    let (value, adaptive) = match value.strip_suffix(";adaptive") {
        Some(rest) => (rest, true),
        None => (value, false),
    };
    let (value, accumulated) = match value.strip_suffix(";accumulated") {
        Some(rest) => (rest, true),
        None => (value, false),
    };
    let (name, function) = match value.strip_suffix(";fn") {
        Some(name) => (name, true),
        None => (value, false),
    };
    let class = TensorClass::ALL.into_iter().find(|c| c.name() == name)?;
    Some(ClassHint {
        class,
        function,
        accumulated,
        adaptive,
    })
}

/// The header value announcing `hint`.
pub fn class_header(hint: ClassHint) -> HeaderValue {
    let function = if hint.function { ";fn" } else { "" };
    let accumulated = if hint.accumulated { ";accumulated" } else { "" };
    let adaptive = if hint.adaptive { ";adaptive" } else { "" };
    HeaderValue::try_from(format!(
        "{}{function}{accumulated}{adaptive}",
        hint.class.name()
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// The largest tensor content the requester decodes, if it said. A
/// requester that said nothing (an older sidecar) gets the holder's own
/// bound; a malformed value is treated as 0: nothing is compressed for it.
pub fn max_tensor(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(MAX_TENSOR)?;
    let text = value
        .to_str()
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= 20);
    Some(
        text.filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
    )
}

/// The `tlc-max` value for `bytes`.
pub fn max_tensor_header(bytes: u64) -> HeaderValue {
    HeaderValue::from(bytes)
}

/// The `tlc-hop-ref` value for reference `id`: hex digits.
pub fn reference_header(id: u64) -> HeaderValue {
    HeaderValue::try_from(format!("{id:x}")).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// The reference a `tlc-hop-ref` value names, if it is 1 to 16 hex digits.
pub fn parse_reference(value: &HeaderValue) -> Option<u64> {
    let text = value
        .to_str()
        .ok()
        .filter(|t| (1..=16).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_hexdigit()))?;
    u64::from_str_radix(text, 16).ok()
}

/// Whether the requester reads frames with the entropy stage.
pub fn reads_entropy(headers: &HeaderMap) -> bool {
    headers.get(ENTROPY).is_some_and(|v| v == "zstd")
}

/// The `tlc-mirror` response value for `hash`: hex digits.
pub fn mirror_header(hash: u64) -> HeaderValue {
    reference_header(hash)
}

/// The hash a `tlc-mirror` response value names, if it is 1 to 16 hex
/// digits.
pub fn parse_mirror(value: &HeaderValue) -> Option<u64> {
    parse_reference(value)
}

/// `tlc-agree` for an agreement `a` (clamped to −1..1, three decimals).
pub fn agreement_header(a: f64) -> HeaderValue {
    let a = if a.is_nan() { 0.0 } else { a.clamp(-1.0, 1.0) };
    HeaderValue::from_str(&format!("{a:.3}")).unwrap_or(HeaderValue::from_static("0"))
}

/// The agreement a `tlc-agree` header says; `None` unless it is a
/// decimal from −1 to 1.
pub fn parse_agreement(headers: &HeaderMap) -> Option<f64> {
    let text = headers.get(AGREE)?.to_str().ok()?;
    if text.len() > 16 {
        return None;
    }
    let a: f64 = text.parse().ok()?;
    (-1.0..=1.0).contains(&a).then_some(a)
}

/// Whether the requester checks what it restores (`tlc-mirror: 1`).
pub fn checks_mirror(headers: &HeaderMap) -> bool {
    headers.get(MIRROR).is_some_and(|v| v == "1")
}

/// Whether the requester reads a tensor's first keyframe as int8.
pub fn reads_int8_keyframes(headers: &HeaderMap) -> bool {
    headers.get(KEYFRAME).is_some_and(|v| v == "int8")
}

/// Whether a request came from a sidecar that speaks our envelope version.
pub fn is_peer(headers: &HeaderMap) -> bool {
    headers.get(PEER).is_some_and(|v| v == PROTOCOL)
}

/// Whether a response carries an envelope of our version.
pub fn has_envelope(headers: &HeaderMap) -> bool {
    headers.get(ENVELOPE).is_some_and(|v| v == PROTOCOL)
}

/// Whether the other end marked its call or answer as a sidecar's that
/// speaks hop compression.
pub fn speaks_hop(headers: &HeaderMap) -> bool {
    headers.get(HOP).is_some_and(|v| v == PROTOCOL)
}

/// Whether a call marked by a sidecar ([`speaks_hop`]) carries
/// hop-compressed messages.
pub fn hop_compressed(headers: &HeaderMap) -> bool {
    speaks_hop(headers)
        && headers
            .get("grpc-encoding")
            .is_some_and(|v| v == crate::hop::ENCODING)
}

/// Marks `headers` as a sidecar's that speaks hop compression.
pub fn mark_hop(headers: &mut HeaderMap) {
    headers.insert(HOP, HeaderValue::from_static(PROTOCOL));
}

/// Marks an answer's `headers` as a sidecar's that restores short method
/// paths.
pub fn mark_short_paths(headers: &mut HeaderMap) {
    headers.insert(HOP_PATHS, HeaderValue::from_static(PROTOCOL));
}

/// Whether an answer's sidecar restores short method paths.
pub fn restores_short_paths(headers: &HeaderMap) -> bool {
    headers.get(HOP_PATHS).is_some_and(|v| v == PROTOCOL)
}

/// What a requester measured of the link from a holder, for the holder's
/// decision whether compressing pays (`tlc-link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkHeader {
    /// Bytes per second the holder's answers arrive at; 0: not known.
    pub rate: u64,
    /// The requester's decode cost, picoseconds per raw byte; 0: not known.
    pub decode_ps_per_byte: u64,
}

impl LinkHeader {
    /// `RATE-DECODE`, both decimal.
    pub fn to_header(self) -> HeaderValue {
        let text = format!("{}-{}", self.rate, self.decode_ps_per_byte);
        // Decimal digits and a dash are always a valid value.
        HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("0-0"))
    }

    /// Parses `RATE-DECODE` (1 to 19 decimal digits each); anything else is
    /// `None`.
    pub fn parse(value: &HeaderValue) -> Option<LinkHeader> {
        let (rate, decode) = value.to_str().ok()?.split_once('-')?;
        Some(LinkHeader {
            rate: decimal(rate)?,
            decode_ps_per_byte: decimal(decode)?,
        })
    }
}

/// 1 to 19 decimal digits (always within `u64`), nothing else.
fn decimal(text: &str) -> Option<u64> {
    let ok = (1..=19).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| text.parse().ok()).flatten()
}

/// A `tlc-ack` value for `tokens` (the first [`MAX_ACKS`]); `None` for none.
pub fn ack_header(tokens: &[u64]) -> Option<HeaderValue> {
    if tokens.is_empty() {
        return None;
    }
    let mut text = String::with_capacity(tokens.len().min(MAX_ACKS) * 17);
    for (i, token) in tokens.iter().take(MAX_ACKS).enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("{token:x}"));
    }
    HeaderValue::try_from(text).ok()
}

/// The tokens of a `tlc-ack` value: 1 to [`MAX_ACKS`] comma-separated hex
/// numbers of 1 to 16 digits; anything else is `None` as a whole, so a
/// garbled header releases nothing.
pub fn parse_acks(value: &HeaderValue) -> Option<Vec<u64>> {
    let text = value.to_str().ok()?;
    let mut tokens = Vec::new();
    for part in text.split(',') {
        if tokens.len() == MAX_ACKS {
            return None;
        }
        let ok = (1..=16).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_hexdigit());
        tokens.push(ok.then(|| u64::from_str_radix(part, 16).ok()).flatten()?);
    }
    Some(tokens)
}

/// Every header of the table above (all of them start with [`PREFIX`]).
pub const ALL: [&str; 21] = [
    PEER, REPLICA, CLASS, MAX_TENSOR, ENVELOPE, FALLBACK, HOP, ROWS, ENTROPY, COMPACT, KEYFRAME,
    HOP_REF, HOP_MISS, HOP_AGAIN, HOP_PATHS, IDS, IDS_AGAIN, LINK, ACK, MIRROR, AGREE,
];

/// What every sidecar header's name starts with.
pub const PREFIX: &str = "tlc-";

/// Whether `name` is a sidecar header: any name under [`PREFIX`], known to
/// this build or not (HTTP/2 header names are lower case).
pub fn is_sidecar_header(name: &str) -> bool {
    name.as_bytes()
        .get(..PREFIX.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(PREFIX.as_bytes()))
}

/// Removes every `tlc-*` header, so TensorFlow sees exactly what it sent.
/// By prefix, not by the list of [`ALL`]: a header a peer made up, or one
/// a later version adds, must not reach TensorFlow either.
pub fn strip(headers: &mut HeaderMap) {
    if !headers.keys().any(|name| is_sidecar_header(name.as_str())) {
        return;
    }
    let names: Vec<http::HeaderName> = headers
        .keys()
        .filter(|name| is_sidecar_header(name.as_str()))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests;
