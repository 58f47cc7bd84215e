//! The contexts end to end, without a network: one parameter-side
//! `PullSource` per tensor serving three worker-side `ReplicaStore`s through
//! envelopes, push contexts in a table, and hostile envelopes.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use tlc_codec::{Codec, DecodeError, Feedback, Limits, Sparsity};
use tlc_context::pull::{
    replica_hash, EpochGenerator, KeyframeReason, PullSource, ReplicaState, ReplicaStore, Served,
    Update, DEFAULT_CACHE_LEN,
};
use tlc_context::push::{decode_push, PushContext};
use tlc_context::table::{ContextTable, TableLimits};
use tlc_context::{ApplyError, Refinement};
use tlc_core::TensorKey;
use tlc_wire::envelope::EnvelopeError;

const HOLDER: &str = "/job:ps/replica:0/task:0";
const TENSOR: &str = "dense/kernel/read";
const WORKER: &str = "/job:worker/replica:0/task:0";

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

fn limits() -> TableLimits {
    TableLimits {
        max_bytes: 64 << 20,
        max_age: Duration::from_secs(600),
    }
}

/// A small deterministic generator (xorshift), values in [-1, 1).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

fn norm(v: impl Iterator<Item = f32>) -> f64 {
    v.map(|x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt()
}

/// ||V - R|| / ||V||.
fn relative_error(value: &[f32], replica: &[f32]) -> f64 {
    let diff = norm(value.iter().zip(replica).map(|(v, r)| v - r));
    diff / norm(value.iter().copied())
}

struct Holder {
    source: PullSource,
    /// The last value served, to count distinct values.
    last: Option<Vec<f32>>,
    distinct: u64,
}

impl Holder {
    fn new(epochs: &EpochGenerator) -> Holder {
        Holder {
            source: PullSource::new(epochs.next(), DEFAULT_CACHE_LEN),
            last: None,
            distinct: 0,
        }
    }

    fn encodes(&self) -> u64 {
        let c = self.source.counters();
        c.deltas + c.resets
    }
}

/// One pull by `worker`: the request carries its state, the holder
/// serves, the worker applies; both replicas must then be bit-identical.
fn pull(holder: &mut Holder, worker: &ReplicaStore, value: &[f32], now: Instant) -> Served {
    let key = TensorKey {
        holder: HOLDER.into(),
        requester: WORKER.into(),
        tensor: TENSOR.into(),
    };
    if holder.last.as_deref() != Some(value) {
        holder.distinct += 1;
        holder.last = Some(value.to_vec());
    }
    let state = worker.state(&key, now);
    let mut wire = Vec::new();
    let served = holder
        .source
        .serve(value, state, three_lc(), Refinement::OFF, 7, &mut wire)
        .expect("serve");
    let handed_to_tf = worker
        .apply(&key, &wire, &Limits::default(), now, <[f32]>::to_vec)
        .expect("apply");
    assert_eq!(handed_to_tf.len(), value.len());
    assert_eq!(replica_hash(&handed_to_tf), holder.source.replica_hash());
    assert_eq!(
        worker.replica_hash(&key, now),
        Some(holder.source.replica_hash())
    );
    assert_eq!(worker.state(&key, now), Some(served.state));
    served.served
}

#[test]
fn one_holder_three_workers_fifty_steps() {
    let epochs = EpochGenerator::new(0x5eed);
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let t0 = Instant::now();
    let mut n = 4000;
    let mut value = noise.vec(n, 1.0);
    let mut holder = Holder::new(&epochs);
    let mut retired_encodes = 0;
    let mut retired_distinct = 0;
    let mut workers: Vec<ReplicaStore> = (0..3).map(|_| ReplicaStore::new(limits())).collect();
    let mut served_kinds = Vec::new();
    let mut raw = 0u64;
    let mut retired_wire = 0;

    for step in 0..50u32 {
        let now = t0 + Duration::from_secs(u64::from(step));
        // The model moves by a small gradient-like step, except every
        // seventh step (no update between two reads).
        if step > 0 && step % 7 != 0 {
            let g = noise.vec(n, 2e-3);
            value.iter_mut().zip(&g).for_each(|(v, d)| *v += d);
        }
        match step {
            // Worker 2's sidecar restarts: an empty store.
            20 => workers[2] = ReplicaStore::new(limits()),
            // The holder's sidecar restarts: a new source, a new epoch.
            30 => {
                retired_encodes += holder.encodes();
                retired_distinct += holder.distinct;
                retired_wire += holder.source.counters().wire_bytes;
                holder = Holder::new(&epochs);
            }
            // The tensor changes shape.
            40 => {
                n += 100;
                value.extend(noise.vec(100, 1.0));
            }
            _ => {}
        }
        // Who pulls this step, in a rotating order: worker 0 every step,
        // worker 1 every third step and not at all from 10 to 21 (too far
        // behind for the cache), worker 2 every other step.
        let mut order = [0usize, 1, 2];
        order.rotate_left(step as usize % 3);
        for w in order {
            let pulls = match w {
                0 => true,
                1 => step % 3 == 0 && !(10..=21).contains(&step),
                _ => step % 2 == 0,
            };
            if pulls {
                let served = pull(&mut holder, &workers[w], &value, now);
                served_kinds.push((step, w, served));
                raw += 4 * n as u64;
            }
        }
        if step == 29 || step == 39 || step == 49 {
            // After steady updates R tracks V closely (3LC, s = 1).
            let err = relative_error(&value, holder.source.replica());
            assert!(err < 5e-3, "step {step}: ||V - R|| / ||V|| = {err}");
        }
    }
    let kinds = |f: &dyn Fn(&Served) -> bool| served_kinds.iter().filter(|(_, _, s)| f(s)).count();

    // One encode per distinct value, shared by every worker that pulled it.
    assert_eq!(
        retired_encodes + holder.encodes(),
        retired_distinct + holder.distinct
    );
    assert_eq!(served_kinds.len(), 50 + 13 + 25);

    // Worker 1 pulls every third step: chains of several deltas.
    assert!(served_kinds
        .iter()
        .any(|(_, w, s)| *w == 1 && matches!(s, Served::Chain(k) if *k >= 2)));
    // Its return at step 24 after eleven missed steps: a keyframe.
    assert!(served_kinds.contains(&(24, 1, Served::Keyframe(KeyframeReason::NotCached))));
    // Worker 2 after its restart, everyone after the holder's.
    assert!(served_kinds.contains(&(20, 2, Served::Keyframe(KeyframeReason::NoReplica))));
    for w in 0..3 {
        assert!(served_kinds.contains(&(30, w, Served::Keyframe(KeyframeReason::OtherEpoch))));
    }
    // The shape change: keyframes for all at step 40 and after.
    assert!(served_kinds
        .iter()
        .filter(|(step, _, _)| *step == 40)
        .all(|(_, _, s)| matches!(s, Served::Keyframe(_))));
    // Most answers are cheap.
    assert!(
        kinds(&|s| matches!(s, Served::Chain(_) | Served::UpToDate))
            > 2 * kinds(&|s| matches!(s, Served::Keyframe(_)))
    );
    // And the bytes: with restarts and a shape change, still well under f32.
    let wire = retired_wire + holder.source.counters().wire_bytes;
    assert!(wire * 3 < raw, "wire {wire} raw {raw}");
}

#[test]
fn shared_pulls_cost_one_encode_and_little_wire() {
    // Steady state: every step the model moves, all three workers pull.
    let epochs = EpochGenerator::new(1);
    let mut noise = Noise(42);
    let n = 10_000;
    let mut value = noise.vec(n, 1.0);
    let mut holder = Holder::new(&epochs);
    let workers: Vec<ReplicaStore> = (0..3).map(|_| ReplicaStore::new(limits())).collect();
    let now = Instant::now();
    for w in &workers {
        pull(&mut holder, w, &value, now);
    }
    let before = holder.source.counters();
    for _ in 0..20 {
        let g = noise.vec(n, 1e-3);
        value.iter_mut().zip(&g).for_each(|(v, d)| *v += d);
        for w in &workers {
            assert_eq!(pull(&mut holder, w, &value, now), Served::Chain(1));
        }
    }
    let after = holder.source.counters();
    assert_eq!(after.deltas - before.deltas, 20);
    let raw = after.raw_bytes - before.raw_bytes;
    let wire = after.wire_bytes - before.wire_bytes;
    // 3LC at s = 1 on deltas: well under 2 bits per value with headers.
    assert!(wire * 16 < raw, "wire {wire} raw {raw}");
    let err = relative_error(&value, holder.source.replica());
    assert!(err < 2e-3, "||V - R|| / ||V|| = {err}");
}

#[test]
fn a_steady_model_converges() {
    // Error accumulation in V - R: once the model stops moving, repeated
    // changes of one value still drain the residual of all the others.
    let epochs = EpochGenerator::new(3);
    let mut noise = Noise(7);
    let n = 1000;
    let mut value = noise.vec(n, 1.0);
    let mut source = PullSource::new(epochs.next(), 8);
    let mut out = Vec::new();
    source
        .serve(&value, None, three_lc(), Refinement::OFF, 0, &mut out)
        .unwrap();
    for _ in 0..30 {
        let g = noise.vec(n, 1e-2);
        value.iter_mut().zip(&g).for_each(|(v, d)| *v += d);
        source
            .serve(&value, None, three_lc(), Refinement::OFF, 0, &mut out)
            .unwrap();
    }
    let moving = relative_error(&value, source.replica());
    // Tiny updates to one element give the encoder more versions to send
    // the accumulated error in.
    for i in 0..30 {
        value[0] += if i % 2 == 0 { 1e-6 } else { -1e-6 };
        let served = source
            .serve(&value, None, three_lc(), Refinement::OFF, 0, &mut out)
            .unwrap();
        assert_eq!(served.update, Update::Delta);
    }
    let settled = relative_error(&value, source.replica());
    assert!(settled < moving / 4.0, "moving {moving}, settled {settled}");
}

#[test]
fn push_contexts_in_a_table_keep_error_feedback_through_envelopes() {
    let table: ContextTable<TensorKey, PushContext> = ContextTable::new(limits());
    let mut noise = Noise(11);
    let now = Instant::now();
    let n = 2000;
    let ps = ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"];
    let mut sent = vec![vec![0f64; n]; 2];
    let mut received = vec![vec![0f64; n]; 2];
    let mut decoded = Vec::new();
    for step in 0..30 {
        for (p, task) in ps.iter().enumerate() {
            let key = TensorKey {
                holder: WORKER.into(),
                requester: (*task).into(),
                tensor: "gradients/dense/MatMul_grad/MatMul_1".into(),
            };
            let ctx =
                table.get_or_insert_with(&key, now, || PushContext::new(three_lc(), Feedback::On));
            let g = noise.vec(n, 1e-2);
            let mut wire = Vec::new();
            let s = if step < 15 { 1.0 } else { 1.75 };
            let codec = Codec::ThreeLc {
                sparsity: Sparsity::new(s).unwrap(),
            };
            let encoded = ctx
                .lock()
                .unwrap()
                .encode(&g, codec, Refinement::OFF, step, &mut wire)
                .unwrap();
            assert!(encoded.wire_bytes * 10 < encoded.raw_bytes);
            let got = decode_push(&wire, &Limits::default(), &mut decoded).unwrap();
            assert_eq!(got.fallback_token, step);
            for i in 0..n {
                sent[p][i] += f64::from(g[i]);
                received[p][i] += f64::from(decoded[i]);
            }
        }
    }
    for (p, task) in ps.iter().enumerate() {
        let key = TensorKey {
            holder: WORKER.into(),
            requester: (*task).into(),
            tensor: "gradients/dense/MatMul_grad/MatMul_1".into(),
        };
        let ctx = table.get(&key, now).unwrap();
        let ctx = ctx.lock().unwrap();
        assert_eq!(ctx.counters().frames, 30);
        for i in 0..n {
            let gap = sent[p][i] - received[p][i] - f64::from(ctx.residual()[i]);
            assert!(gap.abs() < 1e-4, "task {p} value {i}: gap {gap}");
        }
    }
    assert_eq!(table.stats().contexts, 2);
    assert!(table.stats().memory_bytes >= 2 * 4 * n);
}

#[test]
fn hostile_envelopes_are_typed_errors() {
    let store = ReplicaStore::new(limits());
    let key = TensorKey {
        holder: HOLDER.into(),
        requester: WORKER.into(),
        tensor: TENSOR.into(),
    };
    let now = Instant::now();
    let small = Limits { max_elements: 1000 };
    let mut source = PullSource::new(NonZeroU64::new(77).unwrap(), 8);
    let mut noise = Noise(5);
    let value = noise.vec(500, 1.0);
    let mut key_frame = Vec::new();
    source
        .serve(&value, None, three_lc(), Refinement::OFF, 0, &mut key_frame)
        .unwrap();
    let apply = |bytes: &[u8]| store.apply(&key, bytes, &small, now, |_| ());

    let mut bad = key_frame.clone();
    bad[..4].copy_from_slice(b"TLCX");
    assert!(matches!(
        apply(&bad),
        Err(ApplyError::Envelope(EnvelopeError::BadMagic(_)))
    ));

    let mut bad = key_frame.clone();
    bad[44] ^= 1;
    assert!(matches!(
        apply(&bad),
        Err(ApplyError::Envelope(EnvelopeError::Checksum { .. }))
    ));

    assert!(matches!(
        apply(&key_frame[..100]),
        Err(ApplyError::Envelope(EnvelopeError::Frame {
            index: 0,
            source: DecodeError::Truncated { .. }
        }))
    ));

    let mut long = key_frame.clone();
    long.extend_from_slice(&[0; 3]);
    assert!(matches!(
        apply(&long),
        Err(ApplyError::Envelope(EnvelopeError::TrailingBytes(3)))
    ));

    // Frame count 2 for a keyframe (header resealed so only the count is wrong).
    let mut bad = key_frame.clone();
    bad[40..44].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&bad[..44]);
    bad[44..48].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        apply(&bad),
        Err(ApplyError::Envelope(EnvelopeError::FrameCount {
            declared: 2,
            expected: 1,
            ..
        }))
    ));
    assert_eq!(store.state(&key, now), None, "nothing applied so far");

    // The real keyframe applies; then a chain whose codec-none frame claims
    // far more values than the limits allow.
    apply(&key_frame).unwrap();
    let state = store.state(&key, now).unwrap();
    let mut frame = Vec::new();
    tlc_codec::Encoder::new(Codec::None, Feedback::Off)
        .encode(&[0.0; 4], &mut frame)
        .unwrap();
    frame[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let mut chain = Vec::new();
    tlc_wire::envelope::write_envelope(
        &tlc_wire::envelope::EnvelopeHeader::chain(
            0,
            state.epoch,
            state.version,
            state.version + 1,
        )
        .unwrap(),
        &[frame],
        &mut chain,
    )
    .unwrap();
    assert!(matches!(
        apply(&chain),
        Err(ApplyError::Envelope(EnvelopeError::Frame {
            index: 0,
            source: DecodeError::TooManyElements { limit: 1000, .. }
        }))
    ));
    // The replica survived all of it.
    assert_eq!(store.state(&key, now), Some(state));
    assert_eq!(store.replica_hash(&key, now), Some(source.replica_hash()));
    assert_eq!(
        state,
        ReplicaState {
            epoch: 77,
            version: 1
        }
    );
}
