//! What the two sidecars of one `RecvTensor` call say to each other about
//! it, as two typed values: the requester's [`Ask`] (in the request) and
//! the holder's [`Mark`] (on the answer). Each is written by one
//! `to_headers` and read by one `parse`, so a field added to either is
//! added in one place, on both sides of the hop at once.
//!
//! The header names and the format of each value are [`crate::peer`]'s;
//! the hop's own headers (`tlc-hop*`) belong to [`crate::hop`]'s layer, and
//! the fallback call's `tlc-fallback` to that call.

use http::{HeaderMap, HeaderValue};

use crate::peer::{
    self, ClassHint, IdsAgainHeader, LinkHeader, ReplicaHeader, RowsHeader, ACK, AGREE, CLASS,
    COMPACT, ENTROPY, ENVELOPE, IDS, IDS_AGAIN, KEYFRAME, LINK, MAX_TENSOR, MIRROR, PEER, PROTOCOL,
    REPLICA, ROWS,
};

/// Everything a requester's sidecar says in a `RecvTensor` request.
///
/// A field the holder cannot read is left out on its own (`None`, `false`
/// or empty): an older or garbled value costs that capability for the
/// call, never the call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ask {
    /// The largest tensor content the requester decodes (`tlc-max`).
    /// `None`: it said nothing (an older sidecar); `Some(0)`: it said
    /// something unreadable, and nothing is compressed for it.
    pub max_tensor: Option<u64>,
    /// Whether it reads frames with the entropy stage (`tlc-entropy`).
    pub entropy: bool,
    /// Whether it reads compact envelopes (`tlc-compact`, [`crate::compact`]).
    pub compact: bool,
    /// Whether it reads a tensor's first keyframe as int8 (`tlc-keyframe`).
    pub int8_keyframes: bool,
    /// Whether it checks what it restores against the holder's hash
    /// (`tlc-mirror: 1`).
    pub mirror: bool,
    /// What its graphs say the tensor is (`tlc-class`).
    pub class: Option<ClassHint>,
    /// Whether it keeps row ids and restores ids sent again (`tlc-ids`).
    pub ids: bool,
    /// Its rows of a row-keyed tensor, if it speaks rows (`tlc-rows`).
    pub rows: Option<RowsHeader>,
    /// How much the workers' pushes of this gradient agree, as it measured
    /// them (`tlc-agree`).
    pub agreement: Option<f64>,
    /// What it measured of the link from the holder (`tlc-link`).
    pub link: Option<LinkHeader>,
    /// Fallback tokens of envelopes it restored since its last call to
    /// this holder (`tlc-ack`, at most [`peer::MAX_ACKS`]; a garbled list
    /// reads as none).
    pub acks: Vec<u64>,
    /// Its replica of the tensor, for a pull (`tlc-replica`).
    pub replica: Option<ReplicaHeader>,
}

impl Ask {
    /// Writes the ask into a request's `headers`, `tlc-peer` first, each
    /// field in a fixed order (what HPACK compresses on the hop stays the
    /// same call after call).
    pub fn to_headers(&self, headers: &mut HeaderMap) {
        headers.insert(PEER, HeaderValue::from_static(PROTOCOL));
        if let Some(bytes) = self.max_tensor {
            headers.insert(MAX_TENSOR, peer::max_tensor_header(bytes));
        }
        if self.entropy {
            headers.insert(ENTROPY, HeaderValue::from_static("zstd"));
        }
        if self.compact {
            headers.insert(COMPACT, HeaderValue::from_static("1"));
        }
        if self.int8_keyframes {
            headers.insert(KEYFRAME, HeaderValue::from_static("int8"));
        }
        if self.mirror {
            headers.insert(MIRROR, HeaderValue::from_static("1"));
        }
        if let Some(hint) = self.class {
            headers.insert(CLASS, peer::class_header(hint));
        }
        if self.ids {
            headers.insert(IDS, HeaderValue::from_static("1"));
        }
        if let Some(rows) = self.rows {
            headers.insert(ROWS, rows.to_header());
        }
        if let Some(agreement) = self.agreement {
            headers.insert(AGREE, peer::agreement_header(agreement));
        }
        if let Some(link) = self.link {
            headers.insert(LINK, link.to_header());
        }
        if let Some(acks) = peer::ack_header(&self.acks) {
            headers.insert(ACK, acks);
        }
        if let Some(replica) = self.replica {
            headers.insert(REPLICA, replica.to_header());
        }
    }

    /// The ask in a request's `headers`; `None` unless a sidecar of this
    /// envelope version sent it (`tlc-peer`).
    pub fn parse(headers: &HeaderMap) -> Option<Ask> {
        if !peer::is_peer(headers) {
            return None;
        }
        let is = |name: &str, value: &str| headers.get(name).is_some_and(|v| v == value);
        Some(Ask {
            max_tensor: peer::max_tensor(headers),
            entropy: is(ENTROPY, "zstd"),
            compact: is(COMPACT, "1"),
            int8_keyframes: is(KEYFRAME, "int8"),
            mirror: is(MIRROR, "1"),
            class: peer::class(headers),
            ids: is(IDS, "1"),
            rows: headers.get(ROWS).and_then(RowsHeader::parse),
            agreement: peer::parse_agreement(headers),
            link: headers.get(LINK).and_then(LinkHeader::parse),
            acks: headers
                .get(ACK)
                .and_then(peer::parse_acks)
                .unwrap_or_default(),
            replica: headers.get(REPLICA).and_then(ReplicaHeader::parse),
        })
    }
}

/// How the holder's sidecar marked its answer: what the requester's must
/// do before TensorFlow may see it. An answer without a mark is
/// TensorFlow's own, untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// `tensor_content` is an envelope (`tlc-envelope`), to be restored.
    Envelope {
        /// xxh3-64 of the content the requester should restore, for a
        /// requester that checks (`tlc-mirror`).
        mirror: Option<u64>,
    },
    /// The values are left out: they are ids of the step the requester
    /// already has (`tlc-ids-again`).
    IdsAgain(IdsAgain),
}

/// Ids sent again by reference, ready to be said: the reference and the
/// header value it is written as (checked when made, so writing a mark
/// cannot fail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdsAgain {
    header: IdsAgainHeader,
    value: HeaderValue,
}

impl IdsAgain {
    /// The mark for `header`; `None` where its tensor name cannot be said
    /// in a header (the ids then go in full).
    pub fn new(header: IdsAgainHeader) -> Option<IdsAgain> {
        let value = header.to_header()?;
        Some(IdsAgain { header, value })
    }

    /// Which earlier ids, and the token of the original.
    pub fn header(&self) -> &IdsAgainHeader {
        &self.header
    }
}

/// An answer marked in a way this build cannot read. Its content is not
/// TensorFlow's, so it must not reach TensorFlow: the requester fetches
/// the original or fails the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// `tlc-ids-again` is present but not a reference this build reads.
    #[error("ids sent again by reference, with an unreadable tlc-ids-again header")]
    UnreadableIdsAgain,
}

impl Mark {
    /// Writes the mark into an answer's `headers`.
    pub fn to_headers(&self, headers: &mut HeaderMap) {
        match self {
            Mark::Envelope { mirror } => {
                headers.insert(ENVELOPE, HeaderValue::from_static(PROTOCOL));
                if let Some(hash) = mirror {
                    headers.insert(MIRROR, peer::mirror_header(*hash));
                }
            }
            Mark::IdsAgain(again) => {
                headers.insert(IDS_AGAIN, again.value.clone());
            }
        }
    }

    /// The mark on an answer's `headers`: `Ok(None)` for an unmarked
    /// answer, an error for a mark that says the content was changed in a
    /// way this build cannot undo. Ids sent again take precedence over an
    /// envelope mark.
    pub fn parse(headers: &HeaderMap) -> Result<Option<Mark>, MarkError> {
        if let Some(value) = headers.get(IDS_AGAIN) {
            let header = IdsAgainHeader::parse(value).ok_or(MarkError::UnreadableIdsAgain)?;
            let again = IdsAgain {
                header,
                value: value.clone(),
            };
            return Ok(Some(Mark::IdsAgain(again)));
        }
        if !peer::has_envelope(headers) {
            return Ok(None);
        }
        let mirror = headers.get(MIRROR).and_then(peer::parse_mirror);
        Ok(Some(Mark::Envelope { mirror }))
    }
}

#[cfg(test)]
mod tests;
