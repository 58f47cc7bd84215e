//! Arbitrary bytes as the values of the `tlc-*` headers a sidecar reads
//! from a peer (`peer.rs`): `tlc-replica` (`ReplicaHeader::parse`),
//! `tlc-class` (`class`), `tlc-max` (`max_tensor`), `tlc-peer` (`is_peer`)
//! and `tlc-envelope` (`has_envelope`); a sixth line is left to the
//! daemon's `fallback_call` target, which reads the same input.
//!
//! The input is split at newlines (which no header value can hold) into
//! one value per header, in that order; a value HTTP cannot carry leaves
//! its header out. Must hold: no panic; what parses is written back by the
//! sidecar's own writer (`to_header`, `class_header`, `max_tensor_header`)
//! to a value that parses the same, and `tlc-class` to the very same
//! bytes; `tlc-max` is 0 unless it is decimal digits; only the exact
//! protocol version counts as a peer or an envelope; `strip` leaves no
//! `tlc-*` header, a name made up from the input's last line included,
//! and every other header.
//!
//! The whole input is also a `tlc-ids-again` value
//! (`IdsAgainHeader::parse`): what parses is written back to the very
//! same bytes when its numbers are canonical (lowercase hex, no leading
//! zeros), and to bytes that parse the same otherwise.
//!
//! The whole input is also a `tlc-link` value (`LinkHeader::parse`), a
//! `tlc-ack` value (`parse_acks`), a `tlc-mirror` response value
//! (`parse_mirror`) and a `tlc-agree` value (`parse_agreement`, from -1 to
//! 1 or nothing): what parses is written back to a value that parses
//! the same (an agreement to within its three decimals), at most `MAX_ACKS` tokens are ever read, and a garbled list
//! releases nothing.
//!
//! The input's lines are also the values of a requester's whole ask (after
//! `tlc-peer: 1`: `tlc-max`, `tlc-entropy`, `tlc-keyframe`, `tlc-mirror`,
//! `tlc-class`, `tlc-ids`, `tlc-rows`, `tlc-agree`, `tlc-link`, `tlc-ack`,
//! `tlc-replica`; `negotiation::Ask::parse`) and of a holder's mark
//! (`tlc-envelope`, `tlc-mirror`, `tlc-ids-again`; `Mark::parse`): an ask
//! written back (`to_headers`) reads as the same ask (its agreement to
//! within three decimals), and once more to exactly the same; a mark
//! written back reads as the same mark; a mark with an unreadable
//! `tlc-ids-again` is an error, never an envelope or TensorFlow's own.
//!
//! The whole input, as text, is also the `:path` of a call a peer's
//! sidecar marked (`short_path::expand`): a short path expands only to a
//! method whose short path it is, and only paths starting `/~` are short.

#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use tlc_wire::negotiation::{Ask, Mark, MarkError};
use tlc_wire::peer::{self, ReplicaHeader};
use tlc_wire::short_path;

const NAMES: [&str; 6] = [
    peer::REPLICA,
    peer::CLASS,
    peer::MAX_TENSOR,
    peer::PEER,
    peer::ENVELOPE,
    peer::FALLBACK,
];

fuzz_target!(|input: &[u8]| {
    let mut headers = HeaderMap::new();
    let mut values: [Option<HeaderValue>; 6] = Default::default();
    for ((name, raw), slot) in NAMES
        .iter()
        .zip(input.split(|&b| b == b'\n'))
        .zip(&mut values)
    {
        if let Ok(value) = HeaderValue::from_bytes(raw) {
            headers.insert(*name, value.clone());
            *slot = Some(value);
        }
    }
    let [replica, class, max, is_peer, envelope, _fallback] = values;

    if let Some(value) = &replica {
        if let Some(parsed) = ReplicaHeader::parse(value) {
            let written = parsed.to_header();
            assert_eq!(ReplicaHeader::parse(&written), Some(parsed), "{written:?}");
            assert_eq!(
                written.to_str().ok(),
                Some(format!("{:x}-{}", parsed.epoch, parsed.version).as_str())
            );
        }
    }

    match (peer::class(&headers), &class) {
        (Some(hint), Some(value)) => {
            let written = peer::class_header(hint);
            assert_eq!(&written, value, "tlc-class is written as it was read");
        }
        (Some(_), None) => panic!("a class without a tlc-class header"),
        (None, _) => {}
    }

    match (peer::max_tensor(&headers), &max) {
        (None, None) => {}
        (Some(bytes), Some(value)) => {
            let text = value.as_bytes();
            let decimal =
                !text.is_empty() && text.len() <= 20 && text.iter().all(u8::is_ascii_digit);
            assert!(bytes == 0 || decimal, "tlc-max {value:?} read as {bytes}");
            let mut again = HeaderMap::new();
            again.insert(peer::MAX_TENSOR, peer::max_tensor_header(bytes));
            assert_eq!(peer::max_tensor(&again), Some(bytes));
        }
        (found, value) => panic!("tlc-max {value:?} read as {found:?}"),
    }

    assert_eq!(
        peer::is_peer(&headers),
        is_peer.as_ref().is_some_and(|v| v.as_bytes() == b"1")
    );
    assert_eq!(
        peer::has_envelope(&headers),
        envelope.as_ref().is_some_and(|v| v.as_bytes() == b"1")
    );

    if let Ok(value) = HeaderValue::from_bytes(input) {
        if let Some(again) = peer::IdsAgainHeader::parse(&value) {
            let written = again.to_header().expect("a parsed reference writes");
            let canonical = value
                .to_str()
                .ok()
                .and_then(|v| v.split_once('-'))
                .and_then(|(token, rest)| Some((token, rest.split_once('-')?)))
                .is_some_and(|(token, (hash, _))| {
                    [token, hash]
                        .iter()
                        .all(|h| h.len() == 1 || !h.starts_with('0'))
                        && [token, hash].iter().all(|h| !h.bytes().any(|b| b.is_ascii_uppercase()))
                });
            if canonical {
                assert_eq!(written, value, "tlc-ids-again is written as it was read");
            }
            assert_eq!(peer::IdsAgainHeader::parse(&written), Some(again));
        }
    }

    if let Ok(value) = HeaderValue::from_bytes(input) {
        if let Some(link) = peer::LinkHeader::parse(&value) {
            assert_eq!(peer::LinkHeader::parse(&link.to_header()), Some(link));
        }
        if let Some(tokens) = peer::parse_acks(&value) {
            assert!(!tokens.is_empty() && tokens.len() <= peer::MAX_ACKS);
            let written = peer::ack_header(&tokens).expect("parsed tokens write");
            assert_eq!(peer::parse_acks(&written), Some(tokens));
        }
        if let Some(hash) = peer::parse_mirror(&value) {
            assert_eq!(peer::parse_mirror(&peer::mirror_header(hash)), Some(hash));
        }
        let mut agree = HeaderMap::new();
        agree.insert(peer::AGREE, value.clone());
        if let Some(a) = peer::parse_agreement(&agree) {
            assert!((-1.0..=1.0).contains(&a));
            agree.insert(peer::AGREE, peer::agreement_header(a));
            let again = peer::parse_agreement(&agree).expect("a written agreement parses");
            assert!((again - a).abs() <= 0.0005 + 1e-12, "{a} {again}");
        }
    }

    if let Ok(path) = std::str::from_utf8(input) {
        match short_path::expand(path) {
            Ok(Some(method)) => assert_eq!(short_path::shorten(method), Some(path)),
            Ok(None) => assert!(!path.starts_with(short_path::PREFIX)),
            Err(_) => assert!(path.starts_with(short_path::PREFIX)),
        }
    }

    negotiate(input);

    let mut stripped = headers.clone();
    // A name the input makes up under `tlc-` goes too (by prefix), and
    // one outside it stays.
    let tail = input.split(|&b| b == b'\n').next_back().unwrap_or_default();
    let made_up = http::HeaderName::from_bytes(&[b"tlc-", tail].concat());
    if let Ok(name) = &made_up {
        stripped.insert(name.clone(), HeaderValue::from_static("1"));
    }
    stripped.insert("x-kept", HeaderValue::from_static("1"));
    peer::strip(&mut stripped);
    assert_eq!(stripped.len(), 1, "every tlc-* header is stripped: {stripped:?}");
    assert!(stripped.contains_key("x-kept"));
});

/// The ask's and the mark's headers, one value per line of `input`.
const ASKED: [&str; 11] = [
    peer::MAX_TENSOR,
    peer::ENTROPY,
    peer::KEYFRAME,
    peer::MIRROR,
    peer::CLASS,
    peer::IDS,
    peer::ROWS,
    peer::AGREE,
    peer::LINK,
    peer::ACK,
    peer::REPLICA,
];
const MARKED: [&str; 3] = [peer::ENVELOPE, peer::MIRROR, peer::IDS_AGAIN];

/// `input`'s lines as the values of `names` (a value HTTP cannot carry
/// leaves its header out), after `first`.
fn headers_of(
    names: &[&'static str],
    input: &[u8],
    first: Option<(&'static str, &'static str)>,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some((name, value)) = first {
        headers.insert(name, HeaderValue::from_static(value));
    }
    for (name, raw) in names.iter().zip(input.split(|&b| b == b'\n')) {
        if let Ok(value) = HeaderValue::from_bytes(raw) {
            headers.insert(*name, value);
        }
    }
    headers
}

/// The ask and the mark read from `input`, written back and read again.
fn negotiate(input: &[u8]) {
    let headers = headers_of(&ASKED, input, Some((peer::PEER, peer::PROTOCOL)));
    let ask = Ask::parse(&headers).expect("tlc-peer: 1 is a peer");
    let mut written = HeaderMap::new();
    ask.to_headers(&mut written);
    let again = Ask::parse(&written).expect("a written ask is a peer's");
    let agreements = (ask.agreement, again.agreement);
    match agreements {
        (Some(a), Some(b)) => assert!((a - b).abs() <= 0.0005 + 1e-12, "{a} {b}"),
        (None, None) => {}
        _ => panic!("agreement {agreements:?}"),
    }
    let mut same = again.clone();
    same.agreement = ask.agreement;
    assert_eq!(same, ask, "an ask reads back as itself");
    let mut twice = HeaderMap::new();
    again.to_headers(&mut twice);
    assert_eq!(Ask::parse(&twice), Some(again), "and then exactly");
    assert!(ask.acks.len() <= peer::MAX_ACKS);

    let headers = headers_of(&MARKED, input, None);
    match Mark::parse(&headers) {
        Ok(Some(mark)) => {
            let mut written = HeaderMap::new();
            mark.to_headers(&mut written);
            assert_eq!(Mark::parse(&written), Ok(Some(mark)));
        }
        Ok(None) => {
            assert!(!peer::has_envelope(&headers));
            assert!(!headers.contains_key(peer::IDS_AGAIN));
        }
        Err(MarkError::UnreadableIdsAgain) => {
            let value = &headers[peer::IDS_AGAIN];
            assert_eq!(peer::IdsAgainHeader::parse(value), None);
        }
    }
}
