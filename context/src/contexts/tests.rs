//! Tests of [`Contexts`]: encode and restore through a pull replica, an
//! exact read and a push's error buffer, and refusals with their reasons.

use tlc_codec::Sparsity;
use tlc_core::Direction;

use super::*;
use crate::pull::Reads;

const HOUR: Duration = Duration::from_secs(3600);

fn contexts(max_bytes: usize) -> Contexts {
    let table = TableLimits {
        max_bytes,
        max_age: HOUR,
    };
    Contexts::new(
        ContextLimits {
            push: table,
            pull: table,
            replicas: table,
            pull_cache_len: 4,
        },
        7,
    )
}

fn call(direction: Direction) -> TensorCall {
    TensorCall {
        tensor: "w1/read".into(),
        tensor_name: "edge_3_w1/read".into(),
        holder_task: "/job:ps/replica:0/task:0".into(),
        holder_incarnation: 1,
        requester_task: "/job:worker/replica:0/task:0".into(),
        direction,
        step_id: 1,
    }
}

fn three_lc() -> Codec {
    Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    }
}

fn encoding(memory: Memory) -> Encoding {
    Encoding {
        codec: three_lc(),
        memory,
        fallback_token: 9,
        entropy: EntropyStage::Off,
        mirror: false,
    }
}

fn values(step: u32) -> Vec<f32> {
    (0..1000)
        .map(|i| (i as f32 * 0.37).sin() + 1e-3 * step as f32 * (i as f32 * 0.11).cos())
        .collect()
}

fn limits() -> Limits {
    Limits { max_elements: 1000 }
}

/// The requester's side of a push envelope (decoded alone).
fn restore_push(
    requester: &Contexts,
    push: &TensorCall,
    envelope: &[u8],
    now: Instant,
) -> Result<Restored<Vec<f32>>, RestoreError> {
    let copy = |_: &[f32]| -> Vec<f32> { unreachable!("a push has no replica") };
    requester.restore(push, (envelope, None), &limits(), now, |v| v, copy)
}

/// The requester's side of a pull envelope, its values copied out.
fn restore_pull(
    requester: &Contexts,
    pull: &TensorCall,
    envelope: &[u8],
    now: Instant,
) -> Restored<Vec<f32>> {
    requester
        .restore(
            pull,
            (envelope, None),
            &limits(),
            now,
            // An exact read's answer: the values alone, no replica.
            |values| values,
            <[f32]>::to_vec,
        )
        .unwrap()
}

/// The holder's pull source of `pull`'s tensor.
fn pull_source(
    holder: &Contexts,
    pull: &TensorCall,
    now: Instant,
) -> std::sync::Arc<std::sync::Mutex<PullSource>> {
    let key = TensorKey {
        holder: pull.holder_task.clone(),
        requester: String::new(),
        tensor: pull.tensor.clone(),
    };
    holder.pull().get(&key, now).unwrap()
}

#[test]
fn a_pull_is_a_keyframe_then_deltas_and_both_replicas_agree() {
    let (holder, requester) = (contexts(1 << 30), contexts(1 << 30));
    let pull = call(Direction::Pull);
    let now = Instant::now();
    for step in 0..3 {
        let memory = Memory::Replica {
            requester: requester.replica_state(&pull, now).into(),
            refine: Refinement::OFF,
        };
        let mut envelope = Vec::new();
        let encoded = holder
            .encode(&pull, &values(step), encoding(memory), now, &mut envelope)
            .unwrap();
        assert_eq!(encoded.keyframe, step == 0, "step {step}");
        let restored = restore_pull(&requester, &pull, &envelope, now);
        assert_eq!(restored.keyframe, step == 0);
        let source = pull_source(&holder, &pull, now);
        assert_eq!(lock(&source).replica(), restored.content.as_slice());
    }
    assert_eq!(holder.sizes()[1].contexts, 1);
    assert_eq!(requester.sizes()[2].contexts, 1);
}

#[test]
fn an_exact_read_is_the_model_and_moves_no_replica() {
    let (holder, requester, other) = (contexts(1 << 30), contexts(1 << 30), contexts(1 << 30));
    let pull = call(Direction::Pull);
    let now = Instant::now();
    // `pull` reads steps 0..3 as training does, `other` only step 0.
    let read = |from: &Contexts, step, exact| {
        let memory = Memory::Replica {
            requester: Requester {
                reads: if exact { Reads::Exact } else { Reads::Replica },
                ..from.replica_state(&pull, now).into()
            },
            refine: Refinement::OFF,
        };
        let mut envelope = Vec::new();
        holder
            .encode(&pull, &values(step), encoding(memory), now, &mut envelope)
            .unwrap();
        let restored = restore_pull(from, &pull, &envelope, now);
        (restored.content, envelope.len())
    };
    read(&other, 0, false);
    for step in 0..3 {
        read(&requester, step, false);
    }
    let (approximate, _) = read(&requester, 2, false);
    assert_ne!(approximate, values(2), "3LC leaves the replica off");
    let state = requester.replica_state(&pull, now);
    // An evaluation: the model, bit for bit, as large as the model,
    // and every time.
    for _ in 0..2 {
        let (exact, bytes) = read(&requester, 2, true);
        assert_eq!(exact, values(2));
        assert!(bytes >= 4 * values(2).len(), "{bytes} bytes");
    }
    // No replica moved: the requester's is where training left it, and
    // a requester behind gets what training would have given it.
    assert_eq!(requester.replica_state(&pull, now), state);
    let (again, _) = read(&requester, 2, false);
    assert_eq!(again, approximate);
    let (behind, _) = read(&other, 2, false);
    assert_eq!(behind, approximate);
    let counters = lock(&pull_source(&holder, &pull, now)).counters();
    assert_eq!(counters.settles, 2, "two exact reads");
    assert_eq!(counters.resets, 1, "only the first value");
}

#[test]
fn a_push_keeps_its_error_buffer_and_decodes_alone() {
    let (holder, requester) = (contexts(1 << 30), contexts(1 << 30));
    let push = call(Direction::Push);
    let now = Instant::now();
    let memory = Memory::ErrorFeedback {
        feedback: Feedback::On,
        refine: Refinement::OFF,
        agreement: None,
    };
    let mut envelope = Vec::new();
    holder
        .encode(&push, &values(0), encoding(memory), now, &mut envelope)
        .unwrap();
    let restored = restore_push(&requester, &push, &envelope, now).unwrap();
    assert_eq!(restored.content.len(), 1000);
    assert_eq!(restored.codec, CodecId::ThreeLc);
    assert_eq!(holder.sizes()[0].contexts, 1);
    assert_eq!(requester.sizes()[2].contexts, 0);
}

#[test]
fn refusals_name_their_reason() {
    let tiny = contexts(16);
    let push = call(Direction::Push);
    let now = Instant::now();
    let memory = Memory::ErrorFeedback {
        feedback: Feedback::On,
        refine: Refinement::OFF,
        agreement: None,
    };
    let refused = tiny
        .encode(&push, &values(0), encoding(memory), now, &mut Vec::new())
        .unwrap_err();
    assert_eq!(refused.label(), "context_budget");

    let holder = contexts(1 << 30);
    let pull = call(Direction::Pull);
    let memory = Memory::Replica {
        requester: None.into(),
        refine: Refinement::OFF,
    };
    let mut envelope = Vec::new();
    holder
        .encode(&pull, &values(0), encoding(memory), now, &mut envelope)
        .unwrap();
    let err = holder
        .restore(
            &push,
            (&envelope, None),
            &limits(),
            now,
            |v| v,
            <[f32]>::to_vec,
        )
        .unwrap_err();
    assert!(matches!(err, RestoreError::NotAPull), "{err}");
}

#[test]
fn first_frame_codec_reads_the_frame_header() {
    let codec = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    let mut source = PullSource::new(NonZeroU64::new(7).unwrap(), 4);
    let v1: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01).collect();
    let v2: Vec<f32> = v1.iter().map(|v| v + 0.5).collect();
    let mut keyframe = Vec::new();
    let first = source
        .serve(&v1, None, codec, Refinement::OFF, 1, &mut keyframe)
        .unwrap();
    assert_eq!(first_frame_codec(&keyframe), CodecId::None);
    let mut up_to_date = Vec::new();
    source
        .serve(
            &v1,
            Some(first.state),
            codec,
            Refinement::OFF,
            2,
            &mut up_to_date,
        )
        .unwrap();
    assert_eq!(first_frame_codec(&up_to_date), CodecId::None);
    let mut chain = Vec::new();
    source
        .serve(
            &v2,
            Some(first.state),
            codec,
            Refinement::OFF,
            3,
            &mut chain,
        )
        .unwrap();
    assert_eq!(EnvelopeHeader::parse(&chain).unwrap().kind, Kind::Chain);
    assert_eq!(first_frame_codec(&chain), CodecId::ThreeLc);
}

#[test]
fn the_mirror_hash_is_what_the_requester_restores() {
    let (holder, requester, behind) = (contexts(1 << 30), contexts(1 << 30), contexts(1 << 30));
    let pull = call(Direction::Pull);
    let now = Instant::now();
    let mirrored = |memory| Encoding {
        mirror: true,
        ..encoding(memory)
    };
    // Pulls: a keyframe, deltas, a chain to a requester that skipped
    // steps, an exact read.
    for (step, from, reads) in [
        (0, &requester, Reads::Replica),
        (0, &behind, Reads::Replica),
        (1, &requester, Reads::Replica),
        (2, &requester, Reads::Replica),
        (3, &behind, Reads::Replica),
        (3, &requester, Reads::Exact),
        (4, &requester, Reads::Settle),
    ] {
        let memory = Memory::Replica {
            requester: Requester {
                reads,
                ..from.replica_state(&pull, now).into()
            },
            refine: Refinement::OFF,
        };
        let mut envelope = Vec::new();
        let encoded = holder
            .encode(&pull, &values(step), mirrored(memory), now, &mut envelope)
            .unwrap();
        let restored = restore_pull(from, &pull, &envelope, now);
        assert_eq!(
            encoded.mirror,
            Some(replica_hash(&restored.content)),
            "step {step}, {reads:?}"
        );
    }
    // Pushes, through the error buffer and without memory.
    let push = call(Direction::Push);
    for memory in [
        Memory::ErrorFeedback {
            feedback: Feedback::On,
            refine: Refinement::OFF,
            agreement: None,
        },
        Memory::None,
    ] {
        let mut envelope = Vec::new();
        let encoded = holder
            .encode(&push, &values(7), mirrored(memory), now, &mut envelope)
            .unwrap();
        let restored = restore_push(&requester, &push, &envelope, now).unwrap();
        assert_eq!(encoded.mirror, Some(replica_hash(&restored.content)));
        assert_ne!(
            restored.content,
            values(7),
            "3LC is lossy: the check is not trivial"
        );
    }
    // Not asked, not computed.
    let mut envelope = Vec::new();
    let memory = Memory::None;
    let encoded = holder
        .encode(&push, &values(8), encoding(memory), now, &mut envelope)
        .unwrap();
    assert_eq!(encoded.mirror, None);
}
