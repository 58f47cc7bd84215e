//! Writes seeds for the `envelope` fuzz target: envelopes the daemon itself
//! produces (a keyframe, chains from the target's replica state, pushes in
//! every codec, refined pushes of several frames), each prefixed with the
//! mode byte 1 (fix checksums after mutation).
//!
//!     cargo run --bin seed_envelope -- corpus/envelope

use std::num::NonZeroU64;
use std::path::PathBuf;

use tlc_codec::{Codec, Feedback, Sparsity};
use tlc_daemon::context::pull::PullSource;
use tlc_daemon::context::{encode_stateless, PassScale, PushContext, Refinement};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: seed_envelope DIR")?);
    std::fs::create_dir_all(&dir)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let three_lc = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    let refine = Refinement {
        target: 0.001,
        max_passes: 8,
        scale: PassScale::Max,
    };

    // Pulls from the fuzz target's replica state: epoch 1, version 1,
    // eight values of 0.5.
    let mut source = PullSource::new(NonZeroU64::MIN, 8);
    let mut value = vec![0.5f32; 8];
    let mut out = Vec::new();
    source.serve(&value, None, Codec::None, Refinement::OFF, 1, &mut out)?;
    seeds.push(("keyframe".into(), out));
    let state = |v: u64| {
        Some(tlc_daemon::context::ReplicaState {
            epoch: 1,
            version: v,
        })
    };
    for (step, r) in [(1, Refinement::OFF), (2, refine)] {
        for (i, v) in value.iter_mut().enumerate() {
            *v += (i as f32 - 3.5) * 0.01 * step as f32;
        }
        let mut out = Vec::new();
        source.serve(&value, state(1), three_lc, r, 2, &mut out)?;
        seeds.push((format!("chain-{step}"), out));
    }

    // Pushes, one per codec, and refined 3LC pushes.
    let gradient: Vec<f32> = (0..1000)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
        .collect();
    for codec in [
        Codec::None,
        Codec::Fp16,
        Codec::Bf16,
        Codec::Int8,
        Codec::OneBit,
        Codec::TernGrad { seed: 1 },
        three_lc,
    ] {
        let mut out = Vec::new();
        encode_stateless(&gradient, codec, 3, &mut out)?;
        seeds.push((format!("push-{}", codec.id().name()), out));
    }
    let mut context = PushContext::new(three_lc, Feedback::On);
    for step in 0..3 {
        let mut out = Vec::new();
        context.encode(&gradient, three_lc, refine, 4 + step, &mut out)?;
        seeds.push((format!("push-refined-{step}"), out));
    }

    for (name, bytes) in &seeds {
        let mut seed = vec![1u8];
        seed.extend_from_slice(bytes);
        std::fs::write(dir.join(name), seed)?;
    }
    eprintln!("{} seeds in {}", seeds.len(), dir.display());
    Ok(())
}
