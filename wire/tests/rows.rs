//! Tests of the rows section and of rows envelopes, hostile ones included.

use tlc_codec::{Codec, CodecId, DecodeError, Encoder, Feedback, Limits, Sparsity};
use tlc_wire::envelope::{
    write_envelope, write_rows_envelope, Envelope, EnvelopeError, EnvelopeHeader, Kind, HEADER_LEN,
};
use tlc_wire::rows::*;

fn frame(codec: Codec, values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    Encoder::new(codec, Feedback::Off)
        .encode(values, &mut out)
        .unwrap();
    out
}

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.25 - 1.0).collect()
}

/// 5 positions, 3 distinct ids, 1 of them held, rows of 2 values.
fn pull_section() -> RowsSection {
    RowsSection {
        ids_hash: ids_hash(&[7, 9, 7, 11, 9]),
        positions: 5,
        unique: 3,
        hits: 1,
        dim: 2,
        max_rows: 10,
    }
}

fn push_section() -> RowsSection {
    RowsSection {
        hits: 0,
        max_rows: 0,
        ..pull_section()
    }
}

/// The frames of [`pull_section`]'s pull: a keyframe of the 2 rows the
/// requester lacks (4 values), then one pass over the held row's delta.
fn pull_frames() -> [Vec<u8>; 2] {
    [
        frame(Codec::Fp16, &values(4)),
        frame(three_lc(), &values(2)),
    ]
}

/// Header, section and frames as given, without validation: what a
/// hostile peer could send.
fn forge(header: EnvelopeHeader, section: RowsSection, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    header.write(&mut out);
    section.write(&mut out);
    for f in frames {
        out.extend_from_slice(f);
    }
    out
}

fn good_pull() -> Vec<u8> {
    let header = EnvelopeHeader::rows_pull(3, 77, 4, 5).unwrap();
    let frames = pull_frames();
    let mut out = Vec::new();
    write_rows_envelope(&header, &pull_section(), &frames, &mut out).unwrap();
    out
}

fn good_push() -> Vec<u8> {
    let mut out = Vec::new();
    let frames = [frame(three_lc(), &values(6))];
    write_rows_envelope(
        &EnvelopeHeader::rows_push(8),
        &push_section(),
        &frames,
        &mut out,
    )
    .unwrap();
    out
}

/// Rewrites both checksums (header and section) after a tamper.
fn reseal(bytes: &mut [u8]) {
    if bytes.len() >= HEADER_LEN {
        let crc = crc32c::crc32c(&bytes[..44]);
        bytes[44..48].copy_from_slice(&crc.to_le_bytes());
    }
    let end = HEADER_LEN + ROWS_SECTION_LEN;
    if bytes.len() >= end {
        let crc = crc32c::crc32c(&bytes[HEADER_LEN..end - 4]);
        bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
    }
}

fn parse(bytes: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    Envelope::parse(bytes, &Limits::default())
}

fn outcome(bytes: &[u8]) -> Result<(), EnvelopeError> {
    parse(bytes).map(|_| ())
}

/// How `header` and `section` parse before `frames`, the header
/// declaring `count` of them.
fn declaring(
    count: u32,
    header: EnvelopeHeader,
    section: RowsSection,
    frames: &[Vec<u8>],
) -> Result<(), EnvelopeError> {
    let header = EnvelopeHeader {
        frame_count: count,
        ..header
    };
    outcome(&forge(header, section, frames))
}

/// Whether `envelope` is refused for a header field its `kind` does not
/// allow.
fn refused_field(envelope: &[u8], kind: Kind) -> bool {
    matches!(outcome(envelope), Err(EnvelopeError::Field { kind: k, .. }) if k == kind)
}

#[test]
fn section_layout_is_as_documented() {
    let s = RowsSection {
        ids_hash: 0x0102_0304_0506_0708,
        positions: 9,
        unique: 8,
        hits: 7,
        dim: 6,
        max_rows: 5,
    };
    let mut out = vec![0xee];
    s.write(&mut out);
    let out = &out[1..];
    assert_eq!(out.len(), ROWS_SECTION_LEN);
    assert_eq!(out[0..8], 0x0102_0304_0506_0708u64.to_le_bytes());
    for (at, v) in [(8, 9u32), (12, 8), (16, 7), (20, 6), (24, 5)] {
        assert_eq!(out[at..at + 4], v.to_le_bytes());
    }
    assert_eq!(out[28..32], crc32c::crc32c(&out[..28]).to_le_bytes());
    assert_eq!(RowsSection::parse(out), Ok(s));
}

#[test]
fn ids_hash_is_xxh3_of_the_little_endian_ids() {
    let ids: Vec<i64> = (0..2000).map(|i| i * 7919 - 1_000_000).collect();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(ids_hash(&ids), xxhash_rust::xxh3::xxh3_64(&bytes));
    assert_eq!(ids_hash(&[]), xxhash_rust::xxh3::xxh3_64(&[]));
    assert_ne!(ids_hash(&[1, 2]), ids_hash(&[2, 1]));
}

#[test]
fn rows_envelopes_round_trip() {
    let bytes = good_pull();
    assert_eq!(bytes[5], 4);
    let env = parse(&bytes).unwrap();
    assert_eq!(env.header.kind, Kind::RowsPull);
    assert_eq!((env.header.base_version, env.header.target_version), (4, 5));
    assert_eq!(env.rows(), Some(pull_section()));
    assert_eq!(env.frames().len(), 2);
    assert_eq!(env.frames()[0].header.codec(), CodecId::Fp16);
    assert_eq!(env.frames()[0].header.elements, 4);
    assert_eq!(env.frames()[1].header.elements, 2);

    let bytes = good_push();
    assert_eq!(bytes[5], 5);
    let env = parse(&bytes).unwrap();
    assert_eq!(env.header, EnvelopeHeader::rows_push(8));
    assert_eq!(env.rows(), Some(push_section()));
    assert_eq!(env.frames().len(), 1);
    assert_eq!(env.frames()[0].header.elements, 6);

    // From an empty mirror: base 0, no hits, the deltas frame empty.
    let section = RowsSection {
        hits: 0,
        ..pull_section()
    };
    let header = EnvelopeHeader::rows_pull(0, 1, 0, 1).unwrap();
    let frames = [frame(Codec::None, &values(6)), frame(three_lc(), &[])];
    let mut out = Vec::new();
    write_rows_envelope(&header, &section, &frames, &mut out).unwrap();
    assert_eq!(parse(&out).unwrap().rows(), Some(section));

    // The dense kinds have no section.
    let mut push = Vec::new();
    write_envelope(
        &EnvelopeHeader::push(0),
        &[frame(three_lc(), &[1.0])],
        &mut push,
    )
    .unwrap();
    assert_eq!(parse(&push).unwrap().rows(), None);
}

#[test]
fn writers_keep_sections_to_their_kinds() {
    let mut out = Vec::new();
    let frames = [frame(three_lc(), &values(6))];
    assert!(write_envelope(&EnvelopeHeader::rows_push(0), &frames, &mut out).is_err());
    let push = EnvelopeHeader::push(0);
    assert!(write_rows_envelope(&push, &push_section(), &frames, &mut out).is_err());
    let pull = EnvelopeHeader::rows_pull(0, 1, 1, 2).unwrap();
    assert!(write_rows_envelope(&pull, &pull_section(), &frames, &mut out).is_err());
    assert!(out.is_empty());
}

#[test]
fn header_rules_of_the_rows_kinds() {
    assert!(EnvelopeHeader::rows_pull(0, 0, 1, 2).is_err());
    assert!(EnvelopeHeader::rows_pull(0, 1, 1, 3).is_err());
    assert!(EnvelopeHeader::rows_pull(0, 1, 2, 2).is_err());
    assert!(EnvelopeHeader::rows_pull(0, 1, u64::MAX, 0).is_err());
    assert!(EnvelopeHeader::rows_pull(0, 1, 0, 1).is_ok());
    let frames = pull_frames();
    let pull = EnvelopeHeader::rows_pull(0, 1, 4, 5).unwrap();
    let bad = [
        EnvelopeHeader { epoch: 0, ..pull },
        EnvelopeHeader {
            target_version: 6,
            ..pull
        },
    ];
    for header in bad {
        let envelope = forge(header, pull_section(), &frames);
        assert!(refused_field(&envelope, Kind::RowsPull));
    }
    // Keyframes, then 1 to 7 passes over the held rows' deltas, each of
    // the held rows' length.
    let with_frames = |count, frames: &[Vec<u8>]| declaring(count, pull, pull_section(), frames);
    let mut passes = frames.to_vec();
    passes.push(frame(three_lc(), &values(2)));
    assert!(with_frames(3, &passes).is_ok());
    for _ in 3..8 {
        passes.push(frame(three_lc(), &values(2)));
    }
    assert!(with_frames(8, &passes).is_ok());
    passes.push(frame(three_lc(), &values(2)));
    assert!(matches!(
        with_frames(9, &passes),
        Err(EnvelopeError::FrameCount {
            declared: 9,
            expected: 8,
            ..
        })
    ));
    assert!(matches!(
        with_frames(1, &frames[..1]),
        Err(EnvelopeError::FrameCount {
            declared: 1,
            expected: 2,
            ..
        })
    ));
    let long_pass = [
        frames[0].clone(),
        frames[1].clone(),
        frame(three_lc(), &values(4)),
    ];
    assert!(matches!(
        with_frames(3, &long_pass),
        Err(EnvelopeError::RowsFrameLength {
            index: 2,
            elements: 4,
            expected: 2,
        })
    ));
    let push = EnvelopeHeader::rows_push(0);
    let one = [frame(three_lc(), &values(6))];
    for header in [
        EnvelopeHeader { epoch: 1, ..push },
        EnvelopeHeader {
            base_version: 1,
            ..push
        },
        EnvelopeHeader {
            target_version: 1,
            ..push
        },
    ] {
        let envelope = forge(header, push_section(), &one);
        assert!(refused_field(&envelope, Kind::RowsPush));
    }
    // One pass, then up to 7 refinements, each of the distinct rows' length.
    let with_frames = |count, frames: &[Vec<u8>]| declaring(count, push, push_section(), frames);
    assert!(with_frames(2, &[one[0].clone(), one[0].clone()]).is_ok());
    let nine = vec![one[0].clone(); 9];
    assert!(matches!(
        with_frames(9, &nine),
        Err(EnvelopeError::FrameCount { declared: 9, .. })
    ));
    assert!(matches!(
        with_frames(2, &[one[0].clone(), frame(three_lc(), &values(4))]),
        Err(EnvelopeError::RowsFrameLength { index: 1, .. })
    ));
}

#[test]
fn section_rules_are_enforced() {
    let frames = pull_frames();
    let pull = EnvelopeHeader::rows_pull(0, 1, 4, 5).unwrap();
    let with = |section: RowsSection| outcome(&forge(pull, section, &frames));
    let s = pull_section();
    let rule = |r: Result<(), EnvelopeError>| {
        assert!(matches!(r, Err(EnvelopeError::Rows { .. })), "{r:?}");
    };
    rule(with(RowsSection { dim: 0, ..s }));
    rule(with(RowsSection { hits: 4, ..s }));
    rule(with(RowsSection { unique: 6, ..s }));
    rule(with(RowsSection {
        unique: 0,
        hits: 0,
        ..s
    }));
    rule(with(RowsSection { max_rows: 2, ..s }));
    // From an empty mirror (base 0) there can be no hits.
    let empty = EnvelopeHeader::rows_pull(0, 1, 0, 1).unwrap();
    let r = outcome(&forge(empty, s, &frames));
    assert!(matches!(r, Err(EnvelopeError::Rows { .. })), "{r:?}");
    // A push has neither hits nor a row bound.
    let push = EnvelopeHeader::rows_push(0);
    let one = [frame(three_lc(), &values(6))];
    for section in [
        RowsSection {
            hits: 1,
            ..push_section()
        },
        RowsSection {
            max_rows: 1,
            ..push_section()
        },
    ] {
        let r = outcome(&forge(push, section, &one));
        assert!(matches!(r, Err(EnvelopeError::Rows { .. })), "{r:?}");
    }
    // A flipped bit in the section, not resealed.
    let mut bad = good_pull();
    bad[HEADER_LEN + 9] ^= 1;
    assert!(matches!(
        parse(&bad),
        Err(EnvelopeError::RowsChecksum { .. })
    ));
    // Truncated inside the section.
    let good = good_pull();
    assert_eq!(
        parse(&good[..HEADER_LEN + 31]).unwrap_err(),
        EnvelopeError::Truncated {
            needed: 80,
            available: 79
        }
    );
    assert!(matches!(
        RowsSection::parse(&good[HEADER_LEN..HEADER_LEN + 5]),
        Err(SectionError::Truncated { needed: 32, .. })
    ));
}

#[test]
fn section_sizes_honour_the_limits() {
    let frames = pull_frames();
    let pull = EnvelopeHeader::rows_pull(0, 1, 4, 5).unwrap();
    let bytes = forge(pull, pull_section(), &frames);
    // positions * dim = 10 is the largest product.
    assert!(Envelope::parse(&bytes, &Limits { max_elements: 10 }).is_ok());
    assert_eq!(
        Envelope::parse(&bytes, &Limits { max_elements: 9 }).unwrap_err(),
        EnvelopeError::RowsTooLarge {
            rows: 5,
            dim: 2,
            limit: 9
        }
    );
    assert_eq!(
        Envelope::parse(&bytes, &Limits { max_elements: 5 }).unwrap_err(),
        EnvelopeError::RowsTooLarge {
            rows: 3,
            dim: 2,
            limit: 5
        }
    );
    // The largest fields multiply within u64 and are refused.
    let huge = RowsSection {
        positions: u32::MAX,
        unique: u32::MAX,
        hits: 0,
        dim: u32::MAX,
        max_rows: u32::MAX,
        ..pull_section()
    };
    let header = EnvelopeHeader::rows_pull(0, 1, 0, 1).unwrap();
    assert!(matches!(
        Envelope::parse(&forge(header, huge, &frames), &Limits::default()),
        Err(EnvelopeError::RowsTooLarge { .. })
    ));
    let unlimited = Limits {
        max_elements: u64::MAX,
    };
    // Past the limits, the frames give the lie away (fails, no panic).
    assert!(matches!(
        Envelope::parse(&forge(header, huge, &frames), &unlimited),
        Err(EnvelopeError::RowsFrameLength { index: 0, .. })
    ));
}

#[test]
fn frames_hold_what_the_section_declares() {
    let pull = EnvelopeHeader::rows_pull(0, 1, 4, 5).unwrap();
    let [f4, f2] = pull_frames();
    let r = outcome(&forge(pull, pull_section(), &[f2.clone(), f2.clone()]));
    assert_eq!(
        r.unwrap_err(),
        EnvelopeError::RowsFrameLength {
            index: 0,
            elements: 2,
            expected: 4
        }
    );
    let r = outcome(&forge(pull, pull_section(), &[f4.clone(), f4.clone()]));
    assert_eq!(
        r.unwrap_err(),
        EnvelopeError::RowsFrameLength {
            index: 1,
            elements: 4,
            expected: 2
        }
    );
    let push = EnvelopeHeader::rows_push(0);
    let r = outcome(&forge(push, push_section(), std::slice::from_ref(&f4)));
    assert_eq!(
        r.unwrap_err(),
        EnvelopeError::RowsFrameLength {
            index: 0,
            elements: 4,
            expected: 6
        }
    );
    // A missing frame, trailing bytes.
    let r = outcome(&forge(pull, pull_section(), std::slice::from_ref(&f4)));
    assert!(matches!(
        r,
        Err(EnvelopeError::Frame {
            index: 1,
            source: DecodeError::Truncated { .. }
        })
    ));
    let mut long = good_push();
    long.push(0);
    assert_eq!(parse(&long).unwrap_err(), EnvelopeError::TrailingBytes(1));
}

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn hostile_rows_envelopes_never_panic() {
    let limits = Limits { max_elements: 64 };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Random bytes, some behind a valid-looking header start.
    for round in 0..2000 {
        let len = rng.below(160);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if round % 2 == 0 && len >= 6 {
            bytes[..4].copy_from_slice(b"TLCE");
            bytes[4] = 1;
            bytes[5] = 4 + (round % 4 == 0) as u8;
            reseal(&mut bytes);
        }
        let _ = Envelope::parse(&bytes, &limits);
    }
    for good in [good_pull(), good_push()] {
        assert!(Envelope::parse(&good, &limits).is_ok());
        // Every prefix.
        for len in 0..good.len() {
            assert!(Envelope::parse(&good[..len], &limits).is_err());
        }
        // Every single-byte corruption, raw and with both checksums
        // made right (so the field checks see it).
        for at in 0..good.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                let _ = Envelope::parse(&bad, &limits);
                reseal(&mut bad);
                let _ = Envelope::parse(&bad, &limits);
            }
        }
        // Random multi-byte mutations of the header and section,
        // resealed: counts, dims and bounds set to anything.
        for _ in 0..3000 {
            let mut bad = good.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(HEADER_LEN + ROWS_SECTION_LEN);
                bad[at] = rng.next() as u8;
            }
            reseal(&mut bad);
            let _ = Envelope::parse(&bad, &limits);
        }
    }
}
