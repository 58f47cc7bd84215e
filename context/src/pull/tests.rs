//! Tests of both sides of pulls, mostly one source against its replicas.

use super::*;
use std::time::{Duration, Instant};
use tlc_codec::{Codec, DecodeError, Encoder, Feedback, Limits, Sparsity};

use crate::refine::Refinement;
use crate::table::TableLimits;
use tlc_core::TensorKey;
use tlc_wire::envelope::{write_envelope, Envelope, EnvelopeError, EnvelopeHeader, HEADER_LEN};

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

fn epoch(e: u64) -> NonZeroU64 {
    NonZeroU64::new(e).unwrap()
}

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32 - n as f32 / 2.0) * scale)
        .collect()
}

/// One serve + apply; asserts the two replicas agree.
fn pull(source: &mut PullSource, replica: &mut Replica, value: &[f32]) -> PullServed {
    let mut wire = Vec::new();
    let served = source
        .serve(
            value,
            replica.state(),
            three_lc(),
            Refinement::OFF,
            0,
            &mut wire,
        )
        .unwrap();
    assert_eq!(served.wire_bytes, wire.len());
    replica.apply(&wire, &Limits::default()).unwrap();
    assert_eq!(replica.state(), Some(served.state));
    assert_eq!(replica.replica_hash(), Some(source.replica_hash()));
    served
}

#[test]
fn hash_is_xxh3_of_the_little_endian_bytes() {
    let values = ramp(3000, 0.1);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(replica_hash(&values), xxhash_rust::xxh3::xxh3_64(&bytes));
    assert_eq!(replica_hash(&[]), xxhash_rust::xxh3::xxh3_64(&[]));
}

#[test]
fn first_value_is_an_exact_keyframe() {
    let mut source = PullSource::new(epoch(5), DEFAULT_CACHE_LEN);
    assert_eq!(source.state(), None);
    let mut replica = Replica::new();
    let v = ramp(100, 0.01);
    let served = pull(&mut source, &mut replica, &v);
    assert_eq!(served.update, Update::Reset);
    assert_eq!(served.served, Served::Keyframe(KeyframeReason::NoReplica));
    assert_eq!(
        served.state,
        ReplicaState {
            epoch: 5,
            version: 1
        }
    );
    assert_eq!(source.replica(), v.as_slice());
    assert_eq!(replica.values(), Some(v.as_slice()));
    // Same value again: up to date, nothing encoded.
    let served = pull(&mut source, &mut replica, &v);
    assert_eq!(
        (served.update, served.served),
        (Update::Unchanged, Served::UpToDate)
    );
    assert_eq!(served.wire_bytes, HEADER_LEN);
}

#[test]
fn a_replica_that_drifts_too_far_is_reset_losslessly() {
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    let v1 = vec![1.0f32; 1000];
    pull(&mut source, &mut replica, &v1);
    // A small step: the delta keeps the replica close.
    let v2: Vec<f32> = v1
        .iter()
        .enumerate()
        .map(|(i, v)| v + 1e-3 * ((i % 7) as f32 - 3.0))
        .collect();
    assert_eq!(pull(&mut source, &mut replica, &v2).update, Update::Delta);
    assert!(drift(&v2, source.replica()) <= MAX_DRIFT);
    // A jump no ternary delta can follow: reset, and the requester
    // gets the value exactly.
    let v3: Vec<f32> = v2
        .iter()
        .enumerate()
        .map(|(i, v)| v + 0.5 * ((i * 37 % 11) as f32 / 5.0 - 1.0))
        .collect();
    let served = pull(&mut source, &mut replica, &v3);
    assert_eq!(served.update, Update::Reset);
    assert_eq!(source.counters().drift_resets, 1);
    assert_eq!(replica.values(), Some(v3.as_slice()));
    assert_eq!(drift(&v3, &v3), 0.0);
    assert_eq!(drift(&[0.0], &[1.0]), f64::INFINITY);
}

#[test]
fn deltas_are_shared_chained_and_bounded() {
    let mut source = PullSource::new(epoch(5), 3);
    let (mut a, mut b) = (Replica::new(), Replica::new());
    let mut v = ramp(200, 0.01);
    pull(&mut source, &mut a, &v);
    pull(&mut source, &mut b, &v);
    for step in 1..=3 {
        v.iter_mut().for_each(|x| *x += 0.001);
        let sa = pull(&mut source, &mut a, &v);
        assert_eq!((sa.update, sa.served), (Update::Delta, Served::Chain(1)));
        if step == 1 {
            let sb = pull(&mut source, &mut b, &v);
            assert_eq!(
                (sb.update, sb.served),
                (Update::Unchanged, Served::Chain(1))
            );
        }
    }
    // b skipped a version: a chain of 2.
    assert_eq!(pull(&mut source, &mut b, &v).served, Served::Chain(2));
    assert_eq!(source.counters().deltas, 3);
    // Four more versions for a; b is now 4 behind a cache of 3.
    for _ in 0..4 {
        v.iter_mut().for_each(|x| *x -= 0.0007);
        pull(&mut source, &mut a, &v);
    }
    assert_eq!(source.cached(), 3);
    let sb = pull(&mut source, &mut b, &v);
    assert_eq!(sb.served, Served::Keyframe(KeyframeReason::NotCached));
}

#[test]
fn keyframes_for_strangers_and_the_future() {
    let mut source = PullSource::new(epoch(5), 8);
    let v = ramp(50, 1.0);
    let mut out = Vec::new();
    source
        .serve(&v, None, three_lc(), Refinement::OFF, 0, &mut out)
        .unwrap();
    let cases = [
        (
            ReplicaState {
                epoch: 4,
                version: 1,
            },
            KeyframeReason::OtherEpoch,
        ),
        (
            ReplicaState {
                epoch: 5,
                version: 2,
            },
            KeyframeReason::Ahead,
        ),
        (
            ReplicaState {
                epoch: 5,
                version: 0,
            },
            KeyframeReason::NotCached,
        ),
    ];
    for (state, reason) in cases {
        let served = source
            .serve(&v, Some(state), three_lc(), Refinement::OFF, 0, &mut out)
            .unwrap();
        assert_eq!(served.served, Served::Keyframe(reason));
    }
}

#[test]
fn long_chains_give_way_to_keyframes() {
    // With the lossless codec every delta is as large as a keyframe.
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    let mut v = ramp(10, 1.0);
    pull(&mut source, &mut replica, &v);
    let old = replica.state();
    for _ in 0..2 {
        v[0] += 1.0;
        source
            .serve(&v, None, Codec::None, Refinement::OFF, 0, &mut Vec::new())
            .unwrap();
    }
    let served = source
        .serve(&v, old, Codec::None, Refinement::OFF, 0, &mut Vec::new())
        .unwrap();
    assert_eq!(served.served, Served::Keyframe(KeyframeReason::ChainLarger));
}

#[test]
fn a_shape_change_resets() {
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    pull(&mut source, &mut replica, &ramp(10, 1.0));
    let served = pull(&mut source, &mut replica, &ramp(12, 1.0));
    assert_eq!(served.update, Update::Reset);
    assert_eq!(served.served, Served::Keyframe(KeyframeReason::NotCached));
    assert_eq!(served.state.version, 2);
    assert_eq!(replica.values().map(<[f32]>::len), Some(12));
}

#[test]
fn non_finite_values_reset_losslessly() {
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    let mut v = ramp(10, 1.0);
    pull(&mut source, &mut replica, &v);
    v[3] = f32::NAN;
    let served = pull(&mut source, &mut replica, &v);
    assert_eq!(served.update, Update::Reset);
    assert_eq!(source.counters().encode_failures, 1);
    assert!(replica.values().unwrap()[3].is_nan());
    v[3] = 1.0;
    // V - R is NaN at 3 again: another lossless reset, not a crash.
    assert_eq!(pull(&mut source, &mut replica, &v).update, Update::Reset);
    assert_eq!(replica.values(), Some(v.as_slice()));
}

#[test]
fn chains_apply_only_at_their_base() {
    let mut source = PullSource::new(epoch(5), 8);
    let (mut a, mut b) = (Replica::new(), Replica::new());
    let mut v = ramp(30, 0.1);
    pull(&mut source, &mut a, &v);
    v[1] += 0.5;
    let mut chain = Vec::new();
    source
        .serve(&v, a.state(), three_lc(), Refinement::OFF, 0, &mut chain)
        .unwrap();
    let limits = Limits::default();
    // b has no replica.
    assert_eq!(
        b.apply(&chain, &limits).unwrap_err(),
        ApplyError::NoReplica {
            need: ReplicaState {
                epoch: 5,
                version: 1
            }
        }
    );
    // b at another version: refused, unchanged.
    let mut other = PullSource::new(epoch(6), 8);
    pull(&mut other, &mut b, &v);
    let before = b.replica_hash();
    assert!(matches!(
        b.apply(&chain, &limits),
        Err(ApplyError::Base { .. })
    ));
    assert_eq!(b.replica_hash(), before);
    // A push is not a pull answer.
    let mut push = Vec::new();
    crate::push::PushContext::new(three_lc(), Feedback::On)
        .encode(&v, three_lc(), Refinement::OFF, 0, &mut push)
        .unwrap();
    assert_eq!(a.apply(&push, &limits).unwrap_err(), ApplyError::NotAPull);
    // a applies it twice? The second time its version moved on.
    a.apply(&chain, &limits).unwrap();
    assert!(matches!(
        a.apply(&chain, &limits),
        Err(ApplyError::Base { .. })
    ));
    assert_eq!(a.replica_hash(), Some(source.replica_hash()));
    assert_eq!(a.counters().errors, 2);
}

/// Builds a chain of three deltas from version 1 and returns
/// (replica at 1, the chain's bytes, the offset of each frame).
fn three_delta_chain() -> (Replica, Vec<u8>, Vec<usize>) {
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    let mut v = ramp(100, 0.01);
    pull(&mut source, &mut replica, &v);
    let old = replica.state();
    for t in 0..3 {
        v[t * 10] += 1.0;
        source
            .serve(&v, None, three_lc(), Refinement::OFF, 0, &mut Vec::new())
            .unwrap();
    }
    let mut chain = Vec::new();
    let served = source
        .serve(&v, old, three_lc(), Refinement::OFF, 0, &mut chain)
        .unwrap();
    assert_eq!(served.served, Served::Chain(3));
    let limits = Limits::default();
    let parsed = Envelope::parse(&chain, &limits).unwrap();
    let mut at = HEADER_LEN;
    let offsets = parsed
        .frames()
        .iter()
        .map(|f| {
            let start = at;
            at += f.header.frame_len();
            start
        })
        .collect();
    (replica, chain, offsets)
}

#[test]
fn a_bad_checksum_in_the_third_frame_leaves_the_replica_unchanged() {
    // Every frame's checksum is verified before the first is applied.
    let (mut replica, mut chain, _) = three_delta_chain();
    let before = (replica.state(), replica.replica_hash());
    let last = chain.len() - 1;
    chain[last] ^= 0x55;
    assert!(matches!(
        replica.apply(&chain, &Limits::default()),
        Err(ApplyError::Envelope(EnvelopeError::Frame {
            index: 2,
            source: DecodeError::Checksum { .. }
        }))
    ));
    assert_eq!((replica.state(), replica.replica_hash()), before);
}

/// Replaces the payload of the 3LC frame at `at` with zero runs that
/// expand past the tensor, and fixes its checksum: the frame parses but
/// does not decode.
fn corrupt_payload(chain: &mut [u8], at: usize) {
    let f = tlc_codec::Frame::parse(&chain[at..], &Limits::default()).unwrap();
    let start = at + f.header.header_len();
    let end = start + f.payload.len();
    chain[start..end].fill(255);
    let crc = crc32c::crc32c(&chain[at..end]);
    chain[end..end + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_corrupt_third_frame_drops_the_replica() {
    let (mut replica, mut chain, offsets) = three_delta_chain();
    corrupt_payload(&mut chain, offsets[2]);
    let err = replica.apply(&chain, &Limits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ApplyError::Dropped {
                index: 2,
                source: DecodeError::CorruptPayload(_)
            }
        ),
        "{err}"
    );
    assert_eq!(replica.state(), None);
    assert_eq!(replica.values(), None);
    assert_eq!(replica.replica_hash(), None);
}

#[test]
fn a_corrupt_first_frame_changes_nothing() {
    let (mut replica, mut chain, offsets) = three_delta_chain();
    let before = (replica.state(), replica.replica_hash());
    corrupt_payload(&mut chain, offsets[0]);
    let err = replica.apply(&chain, &Limits::default()).unwrap_err();
    assert!(matches!(err, ApplyError::Decode { index: 0, .. }), "{err}");
    assert_eq!((replica.state(), replica.replica_hash()), before);
}

#[test]
fn corrupted_chains_never_panic_nor_half_apply() {
    // Every single-byte corruption of a chain, with the header and
    // frame checksums made right again so the corruption gets past
    // them: the replica ends applied, unchanged, or dropped, never
    // anything else.
    let (replica, chain, offsets) = three_delta_chain();
    let limits = Limits { max_elements: 1000 };
    let ends: Vec<usize> = offsets
        .iter()
        .skip(1)
        .copied()
        .chain([chain.len()])
        .collect();
    let before = (replica.state(), replica.replica_hash());
    let mut outcomes = [0usize; 3];
    for at in 0..chain.len() {
        for flip in [0x01u8, 0x80] {
            let mut bad = chain.clone();
            bad[at] ^= flip;
            let crc = crc32c::crc32c(&bad[..44]);
            bad[44..48].copy_from_slice(&crc.to_le_bytes());
            for (&start, &end) in offsets.iter().zip(&ends) {
                let crc = crc32c::crc32c(&bad[start..end - 4]);
                bad[end - 4..end].copy_from_slice(&crc.to_le_bytes());
            }
            let mut r = replica.clone();
            match r.apply(&bad, &limits) {
                Ok(values) => {
                    assert_eq!(values.len(), 100);
                    outcomes[0] += 1;
                }
                Err(ApplyError::Dropped { .. }) => {
                    assert_eq!(r.state(), None);
                    outcomes[1] += 1;
                }
                Err(_) => {
                    assert_eq!((r.state(), r.replica_hash()), before, "byte {at}");
                    outcomes[2] += 1;
                }
            }
        }
    }
    // Corrupt payloads mostly still decode (to other trits): applied.
    assert!(outcomes[0] > 0 && outcomes[2] > 0, "{outcomes:?}");
}

#[test]
fn chain_frames_must_fit_the_replica() {
    // A chain at the right base whose frames have another length.
    let mut source = PullSource::new(epoch(5), 8);
    let mut replica = Replica::new();
    pull(&mut source, &mut replica, &ramp(10, 1.0));
    let mut frame = Vec::new();
    Encoder::new(three_lc(), Feedback::Off)
        .encode(&ramp(11, 1.0), &mut frame)
        .unwrap();
    let mut chain = Vec::new();
    write_envelope(
        &EnvelopeHeader::chain(0, 5, 1, 2).unwrap(),
        &[frame],
        &mut chain,
    )
    .unwrap();
    assert_eq!(
        replica.apply(&chain, &Limits::default()).unwrap_err(),
        ApplyError::Length {
            replica: 10,
            frames: 11
        }
    );
    assert_eq!(
        replica.state(),
        Some(ReplicaState {
            epoch: 5,
            version: 1
        })
    );
}

#[test]
fn keyframes_honour_the_limits() {
    let mut source = PullSource::new(epoch(5), 8);
    let mut key = Vec::new();
    source
        .serve(
            &ramp(1000, 1.0),
            None,
            three_lc(),
            Refinement::OFF,
            0,
            &mut key,
        )
        .unwrap();
    let mut replica = Replica::new();
    let err = replica
        .apply(&key, &Limits { max_elements: 999 })
        .unwrap_err();
    assert!(matches!(
        err,
        ApplyError::Envelope(EnvelopeError::Frame {
            source: DecodeError::TooManyElements { .. },
            ..
        })
    ));
    assert_eq!(replica.state(), None);
}

#[test]
fn an_evicted_source_remade_with_a_new_epoch_sends_keyframes() {
    let epochs = EpochGenerator::new(u64::MAX);
    let first = epochs.next();
    let second = epochs.next();
    assert_eq!(first.get(), u64::MAX);
    assert_eq!(second.get(), 1); // 0 is skipped
    let mut source = PullSource::new(first, 8);
    let mut replica = Replica::new();
    let v = ramp(20, 1.0);
    pull(&mut source, &mut replica, &v);
    // The source is evicted and made again for the same tensor.
    let mut source = PullSource::new(second, 8);
    let served = pull(&mut source, &mut replica, &v);
    assert_eq!(served.served, Served::Keyframe(KeyframeReason::OtherEpoch));
}

#[test]
fn replica_store_applies_under_its_key() {
    let store = ReplicaStore::new(TableLimits {
        max_bytes: 1 << 20,
        max_age: Duration::from_secs(60),
    });
    let key = TensorKey {
        holder: "/job:ps/replica:0/task:0".into(),
        requester: "/job:worker/replica:0/task:0".into(),
        tensor: "w1/read".into(),
    };
    let now = Instant::now();
    assert_eq!(store.state(&key, now), None);
    let mut source = PullSource::new(epoch(9), 8);
    let v = ramp(64, 0.5);
    let mut wire = Vec::new();
    source
        .serve(
            &v,
            store.state(&key, now),
            three_lc(),
            Refinement::OFF,
            0,
            &mut wire,
        )
        .unwrap();
    let copy = store
        .apply(&key, &wire, &Limits::default(), now, <[f32]>::to_vec)
        .unwrap();
    assert_eq!(copy, v);
    assert_eq!(store.state(&key, now), source.state());
    assert_eq!(store.replica_hash(&key, now), Some(source.replica_hash()));
    assert_eq!(store.table().stats().contexts, 1);
    assert!(store.table().stats().memory_bytes >= 256);
    // Evicted: the next request asks for a keyframe.
    store.table().evict(now + Duration::from_secs(61));
    assert_eq!(store.state(&key, now), None);
}

#[test]
fn a_settle_resets_where_f32_cannot_add_up_to_the_value() {
    let mut source = PullSource::new(epoch(5), DEFAULT_CACHE_LEN);
    let mut replica = Replica::new();
    let mut v = ramp(100, 0.01);
    v[0] = 0.0;
    pull(&mut source, &mut replica, &v);
    // 0.0 + (-0.0 - 0.0) is 0.0: no delta gives -0.0 back.
    v[0] = -0.0;
    let served = read(&mut source, &mut replica, &v, Reads::Settle);
    assert_eq!(served.update, Update::Reset);
    assert!(matches!(served.served, Served::Keyframe(_)));
    assert_eq!(replica.replica_hash(), Some(replica_hash(&v)));
    // Read again: nothing to send.
    let served = read(&mut source, &mut replica, &v, Reads::Settle);
    assert_eq!(
        (served.update, served.served),
        (Update::Unchanged, Served::UpToDate)
    );
    assert_eq!(source.counters().settles, 1);
}

/// One serve with `reads` + apply, as [`pull`] does.
fn read(source: &mut PullSource, replica: &mut Replica, value: &[f32], reads: Reads) -> PullServed {
    let mut wire = Vec::new();
    let requester = Requester {
        reads,
        ..replica.state().into()
    };
    let served = source
        .serve(value, requester, three_lc(), Refinement::OFF, 0, &mut wire)
        .unwrap();
    if served.served == Served::Exact {
        // The value alone, for no replica.
        let mut exact = Vec::new();
        crate::push::decode_push(&wire, &Limits::default(), &mut exact).unwrap();
        assert!(exact == value);
        return served;
    }
    replica.apply(&wire, &Limits::default()).unwrap();
    assert_eq!(replica.replica_hash(), Some(source.replica_hash()));
    served
}

#[test]
fn a_reread_of_an_unchanged_value_is_the_value_and_moves_no_replica() {
    let mut source = PullSource::new(epoch(6), DEFAULT_CACHE_LEN);
    let (mut trainer, mut evaluator) = (Replica::new(), Replica::new());
    let mut v = ramp(4096, 0.001);
    read(&mut source, &mut trainer, &v, Reads::SettleRereads);
    // Training: every read finds a new value, and gets the lossy delta.
    for step in 1..4 {
        v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x += ((i * step) % 7) as f32 * 1e-4);
        let served = read(&mut source, &mut trainer, &v, Reads::SettleRereads);
        assert_eq!(served.update, Update::Delta);
        // Another requester behind on the same value: its chain.
        read(&mut source, &mut evaluator, &v, Reads::SettleRereads);
    }
    assert_eq!(source.counters().settles, 0);
    assert_ne!(trainer.replica_hash(), Some(replica_hash(&v)));
    let state = source.state();
    // Training stops: the same requester reads the same value again, and
    // gets it exactly (`read` checks), every time; nothing moves.
    for _ in 0..2 {
        let served = read(&mut source, &mut trainer, &v, Reads::SettleRereads);
        assert_eq!(served.served, Served::Exact);
    }
    assert_eq!(source.state(), state);
    assert_ne!(trainer.replica_hash(), Some(replica_hash(&v)));
    assert_eq!(source.counters().settles, 2);
    // The other requester followed the chain to the same version: its
    // read again is the value too.
    let served = read(&mut source, &mut evaluator, &v, Reads::SettleRereads);
    assert_eq!(served.served, Served::Exact);
    // A new value is training again: a lossy delta, from the replica the
    // reads left where it was.
    v[0] += 1e-3;
    let served = read(&mut source, &mut trainer, &v, Reads::SettleRereads);
    assert_eq!(served.update, Update::Delta);
}

#[test]
fn a_replica_read_never_settles() {
    let mut source = PullSource::new(epoch(7), DEFAULT_CACHE_LEN);
    let mut replica = Replica::new();
    let mut v = ramp(4096, 0.001);
    read(&mut source, &mut replica, &v, Reads::Replica);
    v.iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x += (i % 5) as f32 * 1e-4);
    read(&mut source, &mut replica, &v, Reads::Replica);
    let served = read(&mut source, &mut replica, &v, Reads::Replica);
    assert_eq!(
        (served.update, served.served),
        (Update::Unchanged, Served::UpToDate)
    );
    assert_ne!(replica.replica_hash(), Some(replica_hash(&v)));
    assert_eq!(source.counters().settles, 0);
}
