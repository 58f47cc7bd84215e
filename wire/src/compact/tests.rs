use super::*;
use crate::envelope::{write_envelope, write_rows_envelope, Envelope};
use crate::rows::RowsSection;
use tlc_codec::{Codec, Encoder, EntropyStage, Feedback, Sparsity};

fn frame(codec: Codec, values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = Encoder::new(codec, Feedback::On);
    encoder.set_entropy_stage(EntropyStage::Zstd);
    encoder.encode(values, &mut out).unwrap();
    out
}

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

fn values(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 31) % 97) as f32 / 40.0 - 1.2)
        .collect()
}

/// One envelope of every kind, as the holder's sidecar writes them.
fn every_kind() -> Vec<Vec<u8>> {
    let v = values(64);
    let mut all = Vec::new();
    let mut push = Vec::new();
    let frames = [frame(three_lc(), &v), frame(three_lc(), &v)];
    let header = EnvelopeHeader {
        frame_count: 2,
        ..EnvelopeHeader::push(u64::MAX - 3)
    };
    write_envelope(&header, &frames, &mut push).unwrap();
    all.push(push);
    let mut chain = Vec::new();
    let header = EnvelopeHeader::chain(7, 0xfeed_f00d_dead_beef, 300, 303).unwrap();
    let frames = [
        frame(three_lc(), &v),
        frame(three_lc(), &v),
        frame(three_lc(), &v),
    ];
    write_envelope(&header, &frames, &mut chain).unwrap();
    all.push(chain);
    let mut empty = Vec::new();
    let header = EnvelopeHeader::chain(8, 5, 9, 9).unwrap();
    write_envelope::<Vec<u8>>(&header, &[], &mut empty).unwrap();
    all.push(empty);
    let mut keyframe = Vec::new();
    let header = EnvelopeHeader::keyframe(1, 2, 1);
    write_envelope(&header, &[frame(Codec::None, &v)], &mut keyframe).unwrap();
    all.push(keyframe);
    let ids: Vec<i64> = (0..4).collect();
    let pull = RowsSection {
        ids_hash: crate::ids_hash(&ids),
        positions: 4,
        unique: 4,
        hits: 1,
        dim: 16,
        max_rows: 1000,
    };
    let mut rows_pull = Vec::new();
    let header = EnvelopeHeader::rows_pull(5, 6, 1, 2).unwrap();
    let frames = [frame(Codec::None, &v[..48]), frame(three_lc(), &v[..16])];
    write_rows_envelope(&header, &pull, &frames, &mut rows_pull).unwrap();
    all.push(rows_pull);
    let push_rows = RowsSection {
        hits: 0,
        max_rows: 0,
        ..pull
    };
    let mut rows_push = Vec::new();
    let header = EnvelopeHeader::rows_push(11);
    write_rows_envelope(
        &header,
        &push_rows,
        &[frame(three_lc(), &v)],
        &mut rows_push,
    )
    .unwrap();
    all.push(rows_push);
    all
}

#[test]
fn every_kind_comes_back_byte_for_byte_and_parses() {
    let limits = Limits::default();
    for envelope in every_kind() {
        Envelope::parse(&envelope, &limits).unwrap();
        let mut compact = Vec::new();
        pack(&envelope, &mut compact).unwrap();
        assert!(is_compact(&compact));
        assert!(!is_compact(&envelope));
        let mut back = Vec::new();
        unpack(&compact, &limits, &mut back).unwrap();
        assert_eq!(back, envelope);
    }
}

#[test]
fn a_push_and_a_chain_lose_most_of_their_framing() {
    let [push, chain, ..] = &every_kind()[..] else {
        unreachable!()
    };
    let mut compact = Vec::new();
    pack(push, &mut compact).unwrap();
    // Two 3LC frames: 48 + 2 × 33 bytes of framing, 26 + 2 × ~12 compact.
    assert!(
        push.len() - compact.len() >= 60,
        "{} -> {}",
        push.len(),
        compact.len()
    );
    compact.clear();
    pack(chain, &mut compact).unwrap();
    assert!(
        chain.len() - compact.len() >= 75,
        "{} -> {}",
        chain.len(),
        compact.len()
    );
}

#[test]
fn any_flipped_bit_or_cut_is_refused() {
    let limits = Limits::default();
    for envelope in every_kind() {
        let mut compact = Vec::new();
        pack(&envelope, &mut compact).unwrap();
        let mut out = Vec::new();
        for cut in 0..compact.len() {
            assert!(unpack(&compact[..cut], &limits, &mut out).is_err());
        }
        for bit in 0..compact.len() * 8 {
            let mut bad = compact.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                unpack(&bad, &limits, &mut out).is_err(),
                "bit {bit} flipped went through"
            );
        }
    }
}

/// A compact envelope built by hand with a good checksum: the checks
/// behind the checksum are what a hostile peer reaches.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[test]
fn hostile_fields_behind_a_good_checksum_are_refused() {
    let limits = Limits { max_elements: 100 };
    let mut out = Vec::new();
    let mut head = vec![MARK, Kind::Push as u8];
    head.extend_from_slice(&1u64.to_le_bytes());
    // A push with a base version.
    let mut bad = head.clone();
    bad.extend_from_slice(&[1, 0, 1]);
    assert!(matches!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::Envelope(_))
    ));
    // A frame count no bytes back.
    let mut bad = head.clone();
    bad.extend_from_slice(&[0, 0, 8]);
    assert!(matches!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::Frame { index: 0, .. })
    ));
    // A frame over the caller's element limit.
    let mut bad = head.clone();
    bad.extend_from_slice(&[0, 0, 1, tlc_codec::CodecId::None as u8, 0]);
    put_varint(&mut bad, 101);
    put_varint(&mut bad, 404);
    assert!(matches!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::Frame {
            source: DecodeError::TooManyElements { .. },
            ..
        })
    ));
    // An unknown kind, a chain whose target overflows, a frame count
    // beyond 32 bits, bytes after the last frame.
    let bad = sealed(vec![MARK, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        unpack(&bad, &limits, &mut out),
        Err(CompactError::UnknownKind(9))
    );
    let mut bad = vec![MARK, Kind::Chain as u8];
    bad.extend_from_slice(&[1; 16]);
    put_varint(&mut bad, u64::MAX);
    put_varint(&mut bad, 1);
    assert!(matches!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::Number(_))
    ));
    let mut bad = head.clone();
    bad.extend_from_slice(&[0, 0]);
    put_varint(&mut bad, 1 << 33);
    assert!(matches!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::Number(_))
    ));
    let mut compact = Vec::new();
    pack(&every_kind()[2], &mut compact).unwrap();
    let mut bad = compact[..compact.len() - 4].to_vec();
    bad.push(0);
    assert_eq!(
        unpack(&sealed(bad), &limits, &mut out),
        Err(CompactError::TrailingBytes(1))
    );
}

#[test]
fn a_compact_envelope_that_would_grow_past_its_bound_is_refused() {
    // A chain of one version per frame, each frame of no values: 4
    // compact bytes become 25.
    let limits = Limits::default();
    let frames = 2000u64;
    let mut body = vec![MARK, Kind::Chain as u8];
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(&7u64.to_le_bytes());
    put_varint(&mut body, 1);
    put_varint(&mut body, frames);
    put_varint(&mut body, frames);
    for _ in 0..frames {
        body.extend_from_slice(&[tlc_codec::CodecId::None as u8, 0, 0, 0]);
    }
    let compact = sealed(body);
    let mut out = Vec::new();
    assert_eq!(
        unpack(&compact, &limits, &mut out),
        Err(CompactError::Grows(compact.len()))
    );
    assert!(out.len() <= MAX_GROWTH * compact.len() + GROWTH_SLACK + 64);
}

#[test]
fn what_unpack_writes_is_bounded_by_its_input() {
    // The most a compact byte can become: frames of no values, each 4
    // bytes compact and 25 rebuilt.
    let limits = Limits::default();
    let mut body = vec![MARK, Kind::Push as u8];
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(&[0, 0, 8]);
    for _ in 0..8 {
        body.extend_from_slice(&[tlc_codec::CodecId::None as u8, 0, 0, 0]);
    }
    let compact = sealed(body);
    let mut out = Vec::new();
    unpack(&compact, &limits, &mut out).unwrap();
    assert!(out.len() <= 49 + 19 * 8 + compact.len(), "{}", out.len());
    Envelope::parse(&out, &limits).unwrap();
}
