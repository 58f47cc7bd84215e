//! Tests of the peer headers: each round-trips and rejects junk, and
//! every documented header is stripped before TensorFlow sees it.

use super::*;

#[test]
fn link_and_ack_headers_round_trip_and_reject_junk() {
    let link = LinkHeader {
        rate: 1_250_000,
        decode_ps_per_byte: 850,
    };
    assert_eq!(link.to_header(), "1250000-850");
    assert_eq!(LinkHeader::parse(&link.to_header()), Some(link));
    for junk in [
        "",
        "-",
        "1-",
        "-1",
        "1-2-3",
        "a-1",
        "+1-2",
        "12345678901234567890-1",
    ] {
        assert_eq!(
            LinkHeader::parse(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
    let tokens = [0x1, 0xdead_beef, u64::MAX];
    let value = ack_header(&tokens).unwrap();
    assert_eq!(value, "1,deadbeef,ffffffffffffffff");
    assert_eq!(parse_acks(&value), Some(tokens.to_vec()));
    assert_eq!(ack_header(&[]), None);
    let many: Vec<u64> = (0..100).collect();
    let capped = parse_acks(&ack_header(&many).unwrap()).unwrap();
    assert_eq!(capped, (0..MAX_ACKS as u64).collect::<Vec<_>>());
    for junk in ["", ",", "1,", "g", "1,,2", "11111111111111111", "+1"] {
        assert_eq!(parse_acks(&HeaderValue::from_static(junk)), None, "{junk}");
    }
    let too_many = vec!["1"; MAX_ACKS + 1].join(",");
    assert_eq!(parse_acks(&HeaderValue::try_from(too_many).unwrap()), None);
}

#[test]
fn class_header_round_trips_and_rejects_junk() {
    for class in TensorClass::ALL {
        for bits in 0..8u8 {
            let hint = ClassHint {
                class,
                function: bits & 1 != 0,
                accumulated: bits & 2 != 0,
                adaptive: bits & 4 != 0,
            };
            let mut headers = HeaderMap::new();
            headers.insert(CLASS, class_header(hint));
            assert_eq!(super::class(&headers), Some(hint));
        }
    }
    for junk in [
        "",
        "dense",
        "sparse;",
        "sparse;fn;fn",
        "DENSE_READ",
        "dense_gradient;accumulated;fn",
        "dense_gradient;accumulated;accumulated",
        "dense_gradient;adaptive;accumulated",
        "dense_gradient;adaptive;adaptive",
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(CLASS, HeaderValue::from_static(junk));
        assert_eq!(super::class(&headers), None, "{junk}");
    }
}

#[test]
fn replica_header_round_trips_and_rejects_junk() {
    let header = ReplicaHeader {
        epoch: 0xdead_beef_0123_4567,
        version: 42,
    };
    let value = header.to_header();
    assert_eq!(value, "deadbeef01234567-42");
    assert_eq!(ReplicaHeader::parse(&value), Some(header));
    for junk in ["", "12", "x-1", "1-y", "1-2-3", "-5"] {
        assert_eq!(
            ReplicaHeader::parse(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
}

#[test]
fn reference_header_round_trips_and_rejects_junk() {
    for id in [0, 1, 0xdead_beef, u64::MAX] {
        assert_eq!(parse_reference(&reference_header(id)), Some(id));
    }
    for junk in ["", "x", "-1", "+1", "11112222333344445", " 1"] {
        assert_eq!(
            parse_reference(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
}

#[test]
fn rows_header_round_trips_and_rejects_junk() {
    let header = RowsHeader {
        epoch: 0xabc,
        version: 7,
        max_bytes: 1 << 30,
    };
    assert_eq!(header.to_header(), "abc-7-1073741824");
    assert_eq!(RowsHeader::parse(&header.to_header()), Some(header));
    for junk in ["", "1-2", "1-2-3-4", "x-1-2", "1--2", "1-2-"] {
        assert_eq!(
            RowsHeader::parse(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
}

#[test]
fn max_tensor_header_round_trips_and_junk_means_nothing() {
    let mut headers = HeaderMap::new();
    assert_eq!(max_tensor(&headers), None);
    headers.insert(MAX_TENSOR, max_tensor_header(2 << 30));
    assert_eq!(max_tensor(&headers), Some(2 << 30));
    for junk in ["", "-1", "1e9", "0x10", " 5", "99999999999999999999999"] {
        headers.insert(MAX_TENSOR, HeaderValue::from_static(junk));
        assert_eq!(max_tensor(&headers), Some(0), "{junk}");
    }
}

#[test]
fn ids_again_header_round_trips_and_rejects_junk() {
    let header = IdsAgainHeader {
        token: 0xabc,
        hash: u64::MAX,
        tensor: "edge_118__recv_ids-0".into(),
    };
    let value = header.to_header().unwrap();
    assert_eq!(value, "abc-ffffffffffffffff-edge_118__recv_ids-0");
    assert_eq!(IdsAgainHeader::parse(&value), Some(header.clone()));
    let long = IdsAgainHeader {
        tensor: "x".repeat(1025),
        ..header
    };
    assert_eq!(long.to_header(), None);
    for junk in [
        "",
        "1-2",
        "1-2-",
        "-2-x",
        "1--x",
        "+1-2-x",
        "g-2-x",
        "11112222333344445-2-x",
        "1-11112222333344445-x",
    ] {
        assert_eq!(
            IdsAgainHeader::parse(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
}

#[test]
fn strip_removes_only_tlc_headers() {
    let mut headers = HeaderMap::new();
    for name in ALL {
        headers.insert(name, HeaderValue::from_static("1"));
    }
    headers.insert("grpc-timeout", HeaderValue::from_static("5S"));
    assert!(is_peer(&headers));
    strip(&mut headers);
    assert!(!is_peer(&headers));
    assert_eq!(headers.len(), 1);
}

/// Headers no build knows, and names in any case, go too: a hostile peer
/// may make one up; other headers stay.
#[test]
fn strip_removes_unknown_tlc_headers_by_prefix() {
    let mut headers = HeaderMap::new();
    for name in ["tlc-hop-miss", "tlc-made-up", "tlc-", "tlc-x-1"] {
        headers.insert(name, HeaderValue::from_static("1"));
    }
    headers.append("tlc-made-up", HeaderValue::from_static("2"));
    for name in ["tlcx", "tl-c", "x-tlc-peer", "grpc-status"] {
        headers.insert(name, HeaderValue::from_static("0"));
    }
    strip(&mut headers);
    let mut left: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["grpc-status", "tl-c", "tlcx", "x-tlc-peer"]);
    assert!(is_sidecar_header("TLC-Peer"));
    assert!(!is_sidecar_header("tlc"));
}

/// A header added to the table at the top of this module and not to
/// [`ALL`] would reach TensorFlow.
#[test]
fn every_documented_header_is_stripped() {
    let documented: std::collections::BTreeSet<&str> = include_str!("../peer.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|rest| rest.split([':', '`']).next())
        .collect();
    let stripped: std::collections::BTreeSet<&str> = ALL.into_iter().collect();
    assert_eq!(documented, stripped);
}

#[test]
fn mirror_headers_round_trip_and_reject_junk() {
    for hash in [0, 1, 0xdead_beef, u64::MAX] {
        assert_eq!(parse_mirror(&mirror_header(hash)), Some(hash));
    }
    for junk in ["", "x", "12345678901234567", "-1", "1 2"] {
        assert_eq!(
            parse_mirror(&HeaderValue::from_static(junk)),
            None,
            "{junk}"
        );
    }
    let mut headers = HeaderMap::new();
    assert!(!checks_mirror(&headers));
    headers.insert(MIRROR, HeaderValue::from_static("1"));
    assert!(checks_mirror(&headers));
    headers.insert(MIRROR, HeaderValue::from_static("yes"));
    assert!(!checks_mirror(&headers));
}

#[test]
fn agreement_headers_round_trip_and_reject_junk() {
    let mut headers = HeaderMap::new();
    for (a, said) in [
        (0.1234, 0.123),
        (-1.0, -1.0),
        (1.0, 1.0),
        (3.0, 1.0),
        (f64::NAN, 0.0),
    ] {
        headers.insert(AGREE, agreement_header(a));
        assert_eq!(parse_agreement(&headers), Some(said), "{a}");
    }
    for junk in [
        "",
        "x",
        "1.5",
        "-2",
        "NaN",
        "inf",
        "0.1.2",
        "00000000000000000.5",
    ] {
        headers.insert(AGREE, HeaderValue::from_static(junk));
        assert_eq!(parse_agreement(&headers), None, "{junk:?}");
    }
    headers.remove(AGREE);
    assert_eq!(parse_agreement(&headers), None);
}
