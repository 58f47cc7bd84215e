//! A peer's rows envelope (kinds 4, rows pull, and 5, rows push:
//! `wire/ENVELOPE.md`, `tlc_wire::rows`) as the requesting sidecar reads
//! it (`Sidecar::restore_rows`): `Envelope::parse` with the element limit
//! of the declared shape, then `RowMirror::apply` on the requester's
//! mirror of the holder's rows, or `restore_push`, with the ids this side
//! saw for the step.
//!
//! Random bytes rarely get past a header checksum, a rows section's
//! checksum and its rules, so the input is a plan (read with
//! `arbitrary::Unstructured`) that builds a valid-looking envelope: some
//! steps of a holder's `RowMirror` / `RowErrors` and the requester's
//! mirror kept beside it (each of the holder's own envelopes must parse
//! and apply); then the step's envelope, either the holder's own or one
//! made by hand (a header from `EnvelopeHeader::rows_pull` / `rows_push`,
//! a `RowsSection` whose fields are the step's or the input's, frames from
//! tlc_codec's `Encoder` of as many values as the section asks, or
//! others); then a few bytes mutated, and the header's, the section's and
//! (optionally) every frame's CRC-32C rewritten, so that the mutations
//! reach the checks behind the checksums. The requester's ids are the
//! step's or one changed, dropped, added or swapped.
//!
//! Must hold: no panic; a parsed rows envelope has its section, the frame
//! count of its kind, frames of the lengths its section gives, and
//! `positions * dim` and `unique * dim` within the limit; a requester
//! that refuses an envelope keeps its mirror as it was (version, rows,
//! each row's values); an applied one gives one row per id, each the
//! mirror's row of the id, moves the mirror one version on and keeps at
//! most its row bound, and an untouched envelope of the holder leaves the
//! requester's mirror bit for bit the holder's; a restored push gives one
//! row per id, zeros at a repeated id; an envelope of the other kind is
//! refused. A counting allocator sees no more held at once by parsing
//! and applying than 8 × the declared tensor (`limit * 4` bytes), 256
//! bytes per id, 8 × the input and 64 KiB: nothing sized by what a
//! section claims beyond the limit.
//!
//! Seeds: `daemon/fuzz`'s `seeds` binary (plans, not envelopes: any
//! bytes are a plan).

#![no_main]

mod counting;
mod reseal;

use counting::measure;
use libfuzzer_sys::arbitrary::{self, Unstructured};
use libfuzzer_sys::fuzz_target;
use reseal::{seal, seal_frames, HEADER_CHECKED};
use tlc_codec::{Codec, Encoder, EntropyStage, Feedback, Limits, Sparsity, TopKPercent};
use tlc_context::rows::{restore_push, RowErrors, RowMirror, RowsError, Uniques};
use tlc_context::refine::{PassScale, Refinement};
use tlc_wire::envelope::{Envelope, EnvelopeHeader, Kind, HEADER_LEN};
use tlc_wire::rows::{ids_hash, RowsKind, RowsSection, ROWS_SECTION_LEN};

/// The holder's mirror stream.
const EPOCH: u64 = 0x7e57_0000_0000_0001;
/// The most rows the requester lets a holder's mirror bound ask for (its
/// memory budget, as `rows_within` gives it in the sidecar).
const MAX_ROWS_LIMIT: usize = 4096;
/// Frames of at most this many values are encoded as the section asks;
/// for a larger count the input picks a small one.
const MAX_FRAME_VALUES: u64 = 4096;
/// The rows section's bytes its CRC covers (the CRC follows them).
const SECTION_CHECKED: usize = 28;

fuzz_target!(|input: &[u8]| {
    let mut u = Unstructured::new(input);
    // Running out of input is not an error: Unstructured then gives
    // zeros, and a plan that cannot go on simply stops.
    let _ = run(&mut u, input.len());
});

/// The requester's mirror: none yet, or one kept beside the holder's.
struct Requester {
    mirror: Option<RowMirror>,
}

fn run(u: &mut Unstructured, input_len: usize) -> arbitrary::Result<()> {
    let flags: u8 = u.arbitrary()?;
    let pull = flags & 1 == 0;
    let by_hand = flags & 2 != 0;
    let entropy = if flags & 4 != 0 {
        EntropyStage::Zstd
    } else {
        EntropyStage::Off
    };
    let reseal_frames = flags & 8 == 0;
    let declared_limit = flags & 16 == 0;
    let wide_ids = flags & 32 != 0;
    let dim: usize = u.int_in_range(1..=6)?;
    let max_rows: usize = u.int_in_range(1..=40)?;
    let mut rng = Rng(u.arbitrary::<u32>()? | 1);
    let token: u64 = u.arbitrary()?;
    let steps: usize = u.int_in_range(0..=3)?;
    let mut uniques = Uniques::new();
    let mut seen: Vec<i64> = Vec::new();

    // The steps before: the holder encodes, the requester applies.
    let keyframe_codec = *u.choose(&[
        Codec::None,
        Codec::Fp16,
        Codec::Int8Rows { row_len: 32 },
    ])?;
    let delta_codec = *u.choose(&[
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        },
        Codec::ThreeLc {
            sparsity: Sparsity::new(1.75).expect("a sparsity"),
        },
        Codec::Int8,
        Codec::Fp16,
        Codec::OneBit,
    ])?;
    // Refinement passes: none, or up to 8 frames toward a tight bound.
    let refine = Refinement {
        target: *u.choose(&[f64::INFINITY, 0.5, 0.01, 1e-6])?,
        max_passes: u.int_in_range(1..=9)?,
        scale: PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: tlc_context::Regimes::OFF,
    };
    let mut holder = Holder::new(dim, max_rows, entropy, refine);
    let codecs = [keyframe_codec, delta_codec];
    let mut requester = Requester { mirror: None };
    for _ in 0..steps {
        let ids = gen_ids(u, wide_ids)?;
        seen.extend_from_slice(&ids);
        let values = rng.values(ids.len() * dim);
        let mut out = Vec::new();
        let sent = holder.encode(pull, &ids, &values, codecs, token, &mut uniques, &mut out);
        // A push's requester applies nothing; a refused pull (more
        // distinct ids than the bound) changed nothing and sent nothing.
        if !pull || !sent {
            continue;
        }
        let limits = Limits {
            max_elements: (ids.len() * dim) as u64,
        };
        let parsed = Envelope::parse(&out, &limits).expect("the holder's own rows pull parses");
        let mirror = requester
            .mirror_for(&parsed)
            .expect("a mirror for the holder's own bound");
        let mut values_out = Vec::new();
        mirror
            .apply(&ids, &parsed, &mut uniques, &mut values_out)
            .expect("the holder's own rows pull applies");
    }

    // The step's envelope.
    let ids = gen_ids(u, wide_ids)?;
    seen.extend_from_slice(&ids);
    let values = rng.values(ids.len() * dim);
    let mut envelope = Vec::new();
    let holders = !by_hand
        && holder.encode(pull, &ids, &values, codecs, token, &mut uniques, &mut envelope);
    if !holders {
        envelope.clear();
        let held = |id: i64| {
            requester
                .mirror
                .as_ref()
                .is_some_and(|m| m.row(id).is_some())
        };
        let made = by_hand_envelope(
            u,
            &mut rng,
            pull,
            &ids,
            dim,
            max_rows,
            token,
            requester.mirror.as_ref().map_or(0, RowMirror::version),
            held,
            &mut uniques,
            [keyframe_codec, delta_codec],
            entropy,
            &mut envelope,
        )?;
        if !made {
            return Ok(());
        }
    }
    let original = envelope.clone();
    mutate(u, &mut envelope)?;
    reseal(&mut envelope, reseal_frames);

    // The requester's ids and limit.
    let holder_ids = ids.clone();
    let ids = requester_ids(u, ids, wide_ids)?;
    // The holder's own envelope, unchanged, for the same ids and within
    // the limit of their declared shape: it must parse and apply.
    let faithful = holders && envelope == original && ids == holder_ids && declared_limit;
    seen.extend_from_slice(&ids);
    seen.sort_unstable();
    seen.dedup();
    let max_elements = if declared_limit {
        // The declared shape [positions, dim].
        (ids.len() * dim) as u64
    } else {
        u64::from(u.arbitrary::<u16>()?)
    };
    let limits = Limits { max_elements };
    let bound = 32 * max_elements as usize + 256 * (ids.len() + 1) + 8 * input_len + (64 << 10);

    let (parsed, held) = measure(|| Envelope::parse(&envelope, &limits));
    assert!(held <= bound, "parse held {held} bytes, bound {bound}");
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            assert!(!faithful, "the holder's own envelope is refused: {err}");
            return Ok(());
        }
    };
    if !parsed.header.kind.has_rows() {
        // A kind byte mutated into a plain push that parses as one: the
        // sidecar reads it as such (the `envelope` target's part).
        return Ok(());
    }
    check_parsed(&parsed, &limits);
    let section = parsed.rows().expect("a rows envelope has its section");
    let dim_of = section.dim as usize;
    let mut values_out = Vec::new();
    match parsed.header.kind {
        Kind::RowsPush => {
            let (restored, held) =
                measure(|| restore_push(&ids, &parsed, &mut uniques, &mut values_out));
            assert!(
                held <= bound,
                "restore_push held {held} bytes, bound {bound}"
            );
            if let Err(err) = &restored {
                assert!(!faithful, "the holder's own envelope is refused: {err}");
            }
            if let Ok(applied) = restored {
                assert_eq!(values_out.len(), ids.len() * dim_of);
                assert_eq!(applied.unique as u64, u64::from(section.unique));
                let mut first = std::collections::HashSet::new();
                for (id, row) in ids.iter().zip(values_out.chunks_exact(dim_of)) {
                    if !first.insert(*id) {
                        assert!(row.iter().all(|&v| v == 0.0), "a repeated id's row");
                    }
                }
            }
            let mut mirror = RowMirror::new(EPOCH, dim, max_rows);
            let refused = mirror.apply(&ids, &parsed, &mut uniques, &mut values_out);
            assert!(matches!(refused, Err(RowsError::WrongKind { .. })));
        }
        Kind::RowsPull => {
            let refused = restore_push(&ids, &parsed, &mut uniques, &mut values_out);
            assert!(matches!(refused, Err(RowsError::WrongKind { .. })));
            let h = parsed.header;
            let for_envelope = RowMirror::for_envelope(&parsed, MAX_ROWS_LIMIT);
            let mirror = if h.base_version == 0 {
                // A pull from an empty mirror: the requester starts one
                // with the envelope's bound, if within its budget.
                assert_eq!(
                    for_envelope.is_ok(),
                    section.max_rows as usize <= MAX_ROWS_LIMIT
                );
                let Ok(fresh) = for_envelope else {
                    return Ok(());
                };
                requester.mirror.insert(fresh)
            } else {
                assert!(matches!(for_envelope, Err(RowsError::Base { .. })));
                match requester.mirror.as_mut() {
                    Some(m) if m.epoch() == h.epoch => m,
                    // Another stream: the sidecar starts an empty mirror,
                    // which refuses a pull from a later version.
                    _ => requester.mirror.insert(RowMirror::new(
                        h.epoch,
                        dim_of,
                        section.max_rows as usize,
                    )),
                }
            };
            let before = Snapshot::of(mirror, &seen);
            let (applied, held) =
                measure(|| mirror.apply(&ids, &parsed, &mut uniques, &mut values_out));
            assert!(held <= bound, "apply held {held} bytes, bound {bound}");
            match applied {
                Err(err) => {
                    assert!(!faithful, "the holder's own envelope is refused: {err}");
                    assert_eq!(
                        Snapshot::of(mirror, &seen),
                        before,
                        "a refusal changed the mirror"
                    );
                }
                Ok(applied) => {
                    assert_eq!(mirror.version(), before.version + 1);
                    assert!(mirror.rows() <= mirror.max_rows());
                    assert_eq!(applied.unique as u64, u64::from(section.unique));
                    assert_eq!(applied.hits as u64, u64::from(section.hits));
                    assert_eq!(values_out.len(), ids.len() * mirror.dim());
                    for (id, row) in ids.iter().zip(values_out.chunks_exact(mirror.dim())) {
                        let held = mirror.row(*id).expect("an envelope's row is held");
                        assert!(same_bits(held, row));
                    }
                    if faithful {
                        assert_eq!(mirror.rows(), holder.pull.rows());
                        assert_eq!(mirror.version(), holder.pull.version());
                        assert_eq!(mirror.evictions(), holder.pull.evictions());
                        for id in &seen {
                            let (mine, theirs) = (mirror.row(*id), holder.pull.row(*id));
                            assert_eq!(mine.is_some(), theirs.is_some(), "row {id}");
                            if let (Some(a), Some(b)) = (mine, theirs) {
                                assert!(same_bits(a, b), "row {id} differs from the holder's");
                            }
                        }
                    }
                }
            }
        }
        Kind::Push | Kind::Chain | Kind::Keyframe => unreachable!("checked above"),
    }
    Ok(())
}

/// The holder's side of both directions: its mirror of the requester's
/// rows (pulls) and its gradient rows' error buffers (pushes).
struct Holder {
    pull: RowMirror,
    push: RowErrors,
}

impl Holder {
    fn new(dim: usize, max_rows: usize, entropy: EntropyStage, refine: Refinement) -> Holder {
        let mut pull = RowMirror::new(EPOCH, dim, max_rows);
        pull.set_entropy_stage(entropy);
        pull.set_refinement(refine);
        let mut push = RowErrors::new(dim, max_rows);
        push.set_entropy_stage(entropy);
        push.set_refinement(refine);
        Holder { pull, push }
    }

    /// Encodes `ids` and `values` into `out` as the holder of a pull
    /// (keyframes and deltas) or of a push (deltas) does: whether it sent
    /// them, which it refuses for more distinct ids than its bound.
    #[allow(clippy::too_many_arguments)]
    fn encode(
        &mut self,
        pull: bool,
        ids: &[i64],
        values: &[f32],
        [keyframe, delta]: [Codec; 2],
        token: u64,
        uniques: &mut Uniques,
        out: &mut Vec<u8>,
    ) -> bool {
        if pull {
            let encoded = self.pull.encode(ids, values, &keyframe, &delta, token, uniques, out);
            encoded.is_ok()
        } else {
            self.push.encode(ids, values, &delta, token, uniques, out).is_ok()
        }
    }
}

impl Requester {
    /// The mirror a rows pull applies to, as the sidecar picks it: a new
    /// one for a pull from version 0 or of another epoch.
    fn mirror_for(&mut self, parsed: &Envelope<'_>) -> Result<&mut RowMirror, RowsError> {
        let h = parsed.header;
        let keep = self
            .mirror
            .as_ref()
            .is_some_and(|m| h.base_version != 0 && m.epoch() == h.epoch);
        if !keep {
            self.mirror = Some(RowMirror::for_envelope(parsed, MAX_ROWS_LIMIT)?);
        }
        Ok(self.mirror.as_mut().expect("set above"))
    }
}

/// What a refused envelope must leave as it was.
#[derive(Debug, PartialEq)]
struct Snapshot {
    version: u64,
    rows: usize,
    evictions: u64,
    values: Vec<Option<Vec<u32>>>,
}

impl Snapshot {
    fn of(mirror: &RowMirror, ids: &[i64]) -> Snapshot {
        Snapshot {
            version: mirror.version(),
            rows: mirror.rows(),
            evictions: mirror.evictions(),
            values: ids
                .iter()
                .map(|&id| {
                    mirror
                        .row(id)
                        .map(|r| r.iter().map(|v| v.to_bits()).collect())
                })
                .collect(),
        }
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// What `Envelope::parse` promises of a rows envelope.
fn check_parsed(parsed: &Envelope<'_>, limits: &Limits) {
    let kind = parsed.header.kind;
    let section = parsed.rows().expect("a rows envelope has its section");
    assert!(section.dim >= 1);
    assert!(section.hits <= section.unique && section.unique <= section.positions);
    for rows in [section.unique, section.positions] {
        assert!(u64::from(rows) * u64::from(section.dim) <= limits.max_elements);
    }
    let rows_kind = if kind == Kind::RowsPull {
        RowsKind::Pull
    } else {
        RowsKind::Push
    };
    for (index, frame) in (0u32..).zip(parsed.frames()) {
        assert_eq!(frame.header.elements, section.frame_elements(rows_kind, index));
    }
    assert_eq!(parsed.frames().len() as u64, u64::from(parsed.header.frame_count));
    match kind {
        Kind::RowsPull => {
            assert!(section.unique <= section.max_rows);
            assert!((2..=8).contains(&parsed.header.frame_count));
        }
        _ => {
            assert_eq!((section.hits, section.max_rows), (0, 0));
            assert!((1..=8).contains(&parsed.header.frame_count));
        }
    }
}

/// Ids of a step: up to 24, from a small range (so that they repeat and
/// are held across steps) or any.
fn gen_ids(u: &mut Unstructured, wide: bool) -> arbitrary::Result<Vec<i64>> {
    let len: usize = u.int_in_range(0..=24)?;
    (0..len)
        .map(|_| {
            if wide {
                u.arbitrary::<i64>()
            } else {
                u.int_in_range(0..=15)
            }
        })
        .collect()
}

/// The ids the requester saw: the holder's, or one changed, dropped,
/// added, or two swapped.
fn requester_ids(
    u: &mut Unstructured,
    mut ids: Vec<i64>,
    wide: bool,
) -> arbitrary::Result<Vec<i64>> {
    let choice: u8 = u.int_in_range(0..=7)?;
    let at = if ids.is_empty() {
        0
    } else {
        u.choose_index(ids.len())?
    };
    let id = if wide {
        u.arbitrary::<i64>()?
    } else {
        u.int_in_range(0..=15)?
    };
    match choice {
        4 if !ids.is_empty() => ids[at] = id,
        5 => {
            ids.pop();
        }
        6 => ids.push(id),
        7 if !ids.is_empty() => {
            let last = ids.len() - 1;
            ids.swap(at, last);
        }
        _ => {}
    }
    Ok(ids)
}

/// A section field: the step's own value, a small one, or any.
fn field(u: &mut Unstructured, own: u32) -> arbitrary::Result<u32> {
    Ok(match u.int_in_range(0..=7u8)? {
        0..=4 => own,
        5 => own.wrapping_add(1),
        6 => u.int_in_range(0..=64)?,
        _ => u.arbitrary()?,
    })
}

/// Appends a rows envelope made by hand: its header from
/// `EnvelopeHeader::rows_pull` / `rows_push` (for the requester's version,
/// or another), a section of the step's fields or the input's, and frames
/// of as many values as the section asks (or another count), in a codec
/// the plan picks. Returns whether there is an envelope.
#[allow(clippy::too_many_arguments)]
fn by_hand_envelope(
    u: &mut Unstructured,
    rng: &mut Rng,
    pull: bool,
    ids: &[i64],
    dim: usize,
    max_rows: usize,
    token: u64,
    version: u64,
    held: impl Fn(i64) -> bool,
    uniques: &mut Uniques,
    codecs: [Codec; 2],
    entropy: EntropyStage,
    out: &mut Vec<u8>,
) -> arbitrary::Result<bool> {
    let (unique, hits) = {
        let (unique, _) = uniques.compute(ids);
        (unique.len(), unique.iter().filter(|&&id| held(id)).count())
    };
    let header = if pull {
        let epoch = if u.arbitrary::<u8>()? >= 224 {
            u.arbitrary::<u64>()?
        } else {
            EPOCH
        };
        let base = match u.int_in_range(0..=7u8)? {
            0..=5 => version,
            6 => 0,
            _ => u.arbitrary()?,
        };
        match EnvelopeHeader::rows_pull(token, epoch, base, base.wrapping_add(1)) {
            Ok(header) => header,
            Err(_) => return Ok(false),
        }
    } else {
        EnvelopeHeader::rows_push(token)
    };
    // One pass or a few refinements (pull: after the keyframes), now and
    // then a count out of range.
    let first = u32::from(pull) + 1;
    let frame_count = match u.int_in_range(0..=15u8)? {
        0 => u.int_in_range(0..=10)?,
        n => first + u32::from(n % 3),
    };
    let header = EnvelopeHeader {
        frame_count,
        ..header
    };
    let hash = if u.arbitrary::<u8>()? >= 240 {
        u.arbitrary()?
    } else {
        ids_hash(ids)
    };
    let section = RowsSection {
        ids_hash: hash,
        positions: field(u, ids.len() as u32)?,
        unique: field(u, unique as u32)?,
        hits: field(u, if pull { hits as u32 } else { 0 })?,
        dim: field(u, dim as u32)?,
        max_rows: field(u, if pull { max_rows as u32 } else { 0 })?,
    };
    header.write(out);
    section.write(out);
    let all = [
        Codec::None,
        Codec::Fp16,
        Codec::Bf16,
        Codec::Int8,
        Codec::Int8Rows { row_len: 5 },
        Codec::TernGrad { seed: 7 },
        Codec::OneBit,
        Codec::TopK {
            percent: TopKPercent::P25,
        },
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        },
    ];
    let rows_kind = if pull { RowsKind::Pull } else { RowsKind::Push };
    for index in 0..frame_count {
        let count = section.frame_elements(rows_kind, index);
        let mut n = if count <= MAX_FRAME_VALUES {
            count as usize
        } else {
            u.int_in_range(0..=64)?
        };
        if u.arbitrary::<u8>()? >= 240 {
            n = u.int_in_range(0..=64)?;
        }
        let codec = if u.arbitrary::<u8>()? >= 224 {
            *u.choose(&all)?
        } else if pull {
            codecs[index.min(1) as usize]
        } else {
            codecs[1]
        };
        let mut encoder = Encoder::new(codec, Feedback::Off);
        encoder.set_entropy_stage(entropy);
        // A refused tensor leaves `out` as it was: a frame short.
        let _ = encoder.encode(&rng.values(n), out);
    }
    Ok(true)
}

/// Flips up to four bytes the plan names, and may cut the envelope short
/// or add bytes at its end.
fn mutate(u: &mut Unstructured, envelope: &mut Vec<u8>) -> arbitrary::Result<()> {
    let flips: usize = u.int_in_range(0..=4)?;
    for _ in 0..flips {
        let at = usize::from(u.arbitrary::<u16>()?);
        let xor: u8 = u.arbitrary()?;
        if !envelope.is_empty() {
            let at = at % envelope.len();
            envelope[at] ^= xor;
        }
    }
    match u.int_in_range(0..=7u8)? {
        6 => {
            let cut: usize = u.int_in_range(1..=16)?;
            envelope.truncate(envelope.len().saturating_sub(cut));
        }
        7 => {
            let more: usize = u.int_in_range(1..=16)?;
            envelope.extend_from_slice(u.bytes(more.min(u.len()))?);
        }
        _ => {}
    }
    Ok(())
}

/// Rewrites the header's CRC-32C, the rows section's, and with `frames`
/// each frame's, walking frames by the lengths their headers claim.
fn reseal(data: &mut [u8], frames: bool) {
    if data.len() < HEADER_LEN {
        return;
    }
    seal(data, 0, HEADER_CHECKED);
    let section_end = HEADER_LEN + ROWS_SECTION_LEN;
    if data.len() < section_end {
        return;
    }
    seal(data, HEADER_LEN, HEADER_LEN + SECTION_CHECKED);
    if frames {
        seal_frames(data, section_end);
    }
}

/// Values for rows and deltas: a xorshift stream in [-1, 1).
struct Rng(u32);

impl Rng {
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 17;
                self.0 ^= self.0 << 5;
                (self.0 >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            })
            .collect()
    }
}
