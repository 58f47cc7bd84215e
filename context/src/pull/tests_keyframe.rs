//! Tests of a tensor's lossy first keyframe: the holder keeps the first
//! value as its int8 decode and sends that frame, and every requester,
//! whatever it reads, ends with the same replica.

use super::*;
use tlc_codec::{Codec, CodecId, Limits, Sparsity};

use crate::refine::{PassScale, Refinement};
use tlc_wire::envelope::Envelope;

fn int8() -> Codec {
    CodecId::Int8.with_defaults()
}

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

/// The synchronous pull bound: replicas within 1% (L2) of the model.
fn bound() -> Refinement {
    Refinement {
        target: 0.01,
        max_passes: 8,
        scale: PassScale::Max,
        peak_lag: f64::INFINITY,
        peak_half_life: f64::INFINITY,
        regimes: crate::regime::Regimes::OFF,
    }
}

fn weights(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.05)
        .collect()
}

/// Serves `value` to a requester holding `replica`, applies the answer and
/// returns it with the codec of its first frame.
fn read(
    source: &mut PullSource,
    replica: &mut Replica,
    value: &[f32],
    first_keyframe: Option<Codec>,
) -> (PullServed, Option<CodecId>) {
    let mut wire = Vec::new();
    let requester = Requester {
        has: replica.state(),
        first_keyframe,
        reads: Reads::Replica,
    };
    let served = source
        .serve(value, requester, three_lc(), bound(), 0, &mut wire)
        .unwrap();
    let limits = Limits::default();
    let codec = Envelope::parse(&wire, &limits)
        .unwrap()
        .frames()
        .first()
        .map(|f| f.header.codec());
    replica.apply(&wire, &limits).unwrap();
    assert_eq!(replica.replica_hash(), Some(source.replica_hash()));
    (served, codec)
}

#[test]
fn the_first_value_goes_as_int8_and_every_requester_holds_its_decode() {
    let mut source = PullSource::new(NonZeroU64::new(9).unwrap(), DEFAULT_CACHE_LEN);
    let v = weights(4000);
    let (mut a, mut b) = (Replica::new(), Replica::new());
    let (served, codec) = read(&mut source, &mut a, &v, Some(int8()));
    assert_eq!(served.update, Update::Reset);
    assert_eq!(codec, Some(CodecId::Int8));
    assert!(served.wire_bytes < v.len() * 4 / 3, "{}", served.wire_bytes);
    let off = drift(&v, source.replica());
    assert!(off > 0.0 && off <= 0.01, "drift {off}");
    assert_eq!(source.counters().lossy_starts, 1);
    // A requester that reads lossless keyframes only gets the same
    // replica, as f32.
    let (_, codec) = read(&mut source, &mut b, &v, None);
    assert_eq!(codec, Some(CodecId::None));
    assert_eq!(a.values(), b.values());
    // The next value's delta carries the rounding with the rest: the
    // replica is within the bound of it, and a newcomer now gets the
    // replica losslessly (it is no longer the int8 decode).
    let next: Vec<f32> = v.iter().map(|x| x * 1.01).collect();
    let (served, _) = read(&mut source, &mut a, &next, Some(int8()));
    assert_eq!(served.update, Update::Delta);
    assert!(drift(&next, source.replica()) <= 0.01);
    let (served, codec) = read(&mut source, &mut Replica::new(), &next, Some(int8()));
    assert!(matches!(served.served, Served::Keyframe(_)));
    assert_eq!(codec, Some(CodecId::None));
}

#[test]
fn a_value_int8_would_leave_off_the_bound_starts_lossless() {
    // Ten values five hundred times the rest: int8's step (1000 / 127)
    // rounds the other 3990 to 0 or a step, about 4% of the tensor (L2).
    let mut v: Vec<f32> = weights(4000).iter().map(|x| x * 40.0).collect();
    v[..10].fill(1000.0);
    let mut source = PullSource::new(NonZeroU64::new(9).unwrap(), DEFAULT_CACHE_LEN);
    let mut replica = Replica::new();
    let (served, codec) = read(&mut source, &mut replica, &v, Some(int8()));
    assert_eq!(served.update, Update::Reset);
    assert_eq!(codec, Some(CodecId::None));
    assert_eq!(source.replica(), &v[..]);
    assert_eq!(source.counters().lossy_starts, 0);
    // NaN is not within any bound either.
    let mut nan = weights(100);
    nan[3] = f32::NAN;
    let mut source = PullSource::new(NonZeroU64::new(10).unwrap(), DEFAULT_CACHE_LEN);
    let mut wire = Vec::new();
    let requester = Requester {
        has: None,
        first_keyframe: Some(int8()),
        reads: Reads::Replica,
    };
    source
        .serve(&nan, requester, three_lc(), bound(), 0, &mut wire)
        .unwrap();
    assert_eq!(source.counters().lossy_starts, 0);
    let frames = Envelope::parse(&wire, &Limits::default()).unwrap();
    assert_eq!(frames.frames()[0].header.codec(), CodecId::None);
}

#[test]
fn only_a_first_value_starts_lossy() {
    let mut source = PullSource::new(NonZeroU64::new(9).unwrap(), DEFAULT_CACHE_LEN);
    let v = weights(1000);
    let mut replica = Replica::new();
    read(&mut source, &mut replica, &v, None);
    assert_eq!(source.replica(), &v[..], "lossless: R = V");
    // A requester that reads int8 keyframes arriving later gets R as it
    // is, losslessly: R is not an int8 decode.
    let (_, codec) = read(&mut source, &mut Replica::new(), &v, Some(int8()));
    assert_eq!(codec, Some(CodecId::None));
    assert_eq!(source.counters().lossy_starts, 0);
}
