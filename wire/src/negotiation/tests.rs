//! Tests of the ask and the mark: each round-trips through its headers,
//! a garbled field costs only that field, and the order of the headers is
//! fixed.

use super::*;
use tlc_core::TensorClass;

fn full_ask() -> Ask {
    Ask {
        max_tensor: Some(256 << 20),
        entropy: true,
        compact: true,
        int8_keyframes: true,
        mirror: true,
        class: Some(ClassHint {
            class: TensorClass::DenseGradient,
            function: false,
            accumulated: true,
            adaptive: false,
        }),
        ids: true,
        rows: Some(RowsHeader {
            epoch: 0xab,
            version: 7,
            max_bytes: 1 << 20,
        }),
        agreement: Some(0.25),
        link: Some(LinkHeader {
            rate: 1_250_000,
            decode_ps_per_byte: 850,
        }),
        acks: vec![1, 0xdead_beef],
        replica: Some(ReplicaHeader {
            epoch: 0x1f,
            version: 3,
        }),
    }
}

#[test]
fn an_ask_round_trips_through_its_headers_in_a_fixed_order() {
    let ask = full_ask();
    let mut headers = HeaderMap::new();
    ask.to_headers(&mut headers);
    assert_eq!(Ask::parse(&headers), Some(ask));
    let names: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
    assert_eq!(
        names,
        [
            PEER, MAX_TENSOR, ENTROPY, COMPACT, KEYFRAME, MIRROR, CLASS, IDS, ROWS, AGREE, LINK,
            ACK, REPLICA
        ]
    );

    let least = Ask::default();
    let mut headers = HeaderMap::new();
    least.to_headers(&mut headers);
    assert_eq!(headers.len(), 1, "only tlc-peer: {headers:?}");
    assert_eq!(Ask::parse(&headers), Some(least));
}

#[test]
fn no_peer_no_ask_and_a_garbled_field_costs_only_itself() {
    let mut headers = HeaderMap::new();
    full_ask().to_headers(&mut headers);
    headers.insert(PEER, HeaderValue::from_static("2"));
    assert_eq!(Ask::parse(&headers), None, "another envelope version");
    headers.remove(PEER);
    assert_eq!(Ask::parse(&headers), None, "not a sidecar");

    let garbled = [
        (MAX_TENSOR, "12x"),
        (ENTROPY, "lz4"),
        (COMPACT, "2"),
        (KEYFRAME, "int4"),
        (MIRROR, "yes"),
        (CLASS, "tensor;fn"),
        (IDS, "0"),
        (ROWS, "1-2"),
        (AGREE, "1.5"),
        (LINK, "fast"),
        (ACK, "1,,2"),
        (REPLICA, "z-1"),
    ];
    for (name, junk) in garbled {
        let mut headers = HeaderMap::new();
        full_ask().to_headers(&mut headers);
        headers.insert(name, HeaderValue::from_static(junk));
        let read = Ask::parse(&headers).expect("still a peer");
        let mut expected = full_ask();
        match name {
            MAX_TENSOR => expected.max_tensor = Some(0),
            ENTROPY => expected.entropy = false,
            COMPACT => expected.compact = false,
            KEYFRAME => expected.int8_keyframes = false,
            MIRROR => expected.mirror = false,
            CLASS => expected.class = None,
            IDS => expected.ids = false,
            ROWS => expected.rows = None,
            AGREE => expected.agreement = None,
            LINK => expected.link = None,
            ACK => expected.acks.clear(),
            _ => expected.replica = None,
        }
        assert_eq!(read, expected, "{name}: {junk}");
    }
}

#[test]
fn a_mark_round_trips_and_an_unreadable_one_is_an_error() {
    for mark in [
        Mark::Envelope { mirror: None },
        Mark::Envelope {
            mirror: Some(0x0123_4567_89ab_cdef),
        },
    ] {
        let mut headers = HeaderMap::new();
        mark.to_headers(&mut headers);
        assert_eq!(Mark::parse(&headers), Ok(Some(mark)));
    }
    let again = IdsAgain::new(IdsAgainHeader {
        token: 0x2a,
        hash: 0xfeed,
        tensor: "edge_7_ids;0:0".to_owned(),
    })
    .expect("a name a header carries");
    assert_eq!(again.header().token, 0x2a);
    let mut headers = HeaderMap::new();
    Mark::IdsAgain(again.clone()).to_headers(&mut headers);
    assert_eq!(headers[IDS_AGAIN], "2a-feed-edge_7_ids;0:0");
    assert_eq!(Mark::parse(&headers), Ok(Some(Mark::IdsAgain(again))));

    let unnamed = IdsAgainHeader {
        token: 1,
        hash: 2,
        tensor: String::new(),
    };
    assert_eq!(IdsAgain::new(unnamed), None);

    assert_eq!(Mark::parse(&HeaderMap::new()), Ok(None), "TensorFlow's own");
    let mut headers = HeaderMap::new();
    headers.insert(ENVELOPE, HeaderValue::from_static("2"));
    assert_eq!(Mark::parse(&headers), Ok(None), "another envelope version");
    let mut headers = HeaderMap::new();
    Mark::Envelope { mirror: None }.to_headers(&mut headers);
    headers.insert(IDS_AGAIN, HeaderValue::from_static("nothing-readable"));
    assert_eq!(Mark::parse(&headers), Err(MarkError::UnreadableIdsAgain));
}
