//! Encode and decode throughput of every codec against memcpy of the same
//! buffer, on gradient-like data pushed through one context. 3LC runs also
//! with the entropy stage (`3lc_s1_zstd`), and at 512K values besides 4M.
//!
//! `cargo bench -p tlc-codec --bench codecs` (add `-- 3lc` to filter).

mod common;

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use tlc_codec::{Codec, Encoder, EntropyStage, Feedback, Frame, Limits, Sparsity, TopKPercent};

const ELEMENTS: usize = 4 << 20;
/// The smaller size 3LC is also measured at (a 1024 x 512 weight matrix).
const SMALL: usize = 512 << 10;

/// Heavy-tailed values centred on zero, typically around 1e-3.
fn gradient_like(n: usize, seed: u64) -> Vec<f32> {
    let mut uniform = common::uniform(seed);
    (0..n)
        .map(|_| {
            // Laplace with a log-normal-ish spread of scales.
            let sign = if uniform() < 0.5 { -1.0 } else { 1.0 };
            let scale = 1e-3 * (2.0 * (uniform() - 0.5)).exp();
            sign * scale * -uniform().ln()
        })
        .collect()
}

fn codecs() -> Vec<(String, Codec, EntropyStage)> {
    let off = EntropyStage::Off;
    let mut list = vec![
        ("none".to_string(), Codec::None, off),
        ("fp16".to_string(), Codec::Fp16, off),
        ("int8".to_string(), Codec::Int8, off),
        ("terngrad".to_string(), Codec::TernGrad { seed: 1 }, off),
        ("onebit".to_string(), Codec::OneBit, off),
        (
            "topk5".to_string(),
            Codec::TopK {
                percent: TopKPercent::P5,
            },
            off,
        ),
    ];
    for s in [1.0, 1.75] {
        let sparsity = Sparsity::new(s).expect("valid sparsity");
        list.push((format!("3lc_s{s}"), Codec::ThreeLc { sparsity }, off));
        list.push((
            format!("3lc_s{s}_zstd"),
            Codec::ThreeLc { sparsity },
            EntropyStage::Zstd,
        ));
    }
    list
}

fn make_encoder(codec: Codec, stage: EntropyStage) -> Encoder {
    let mut encoder = Encoder::new(codec, Feedback::default_for(&codec));
    encoder.set_entropy_stage(stage);
    encoder
}

/// Encode and decode of 3LC at 512K values, in a group of its own (the
/// throughput differs from the 4M one).
fn bench_small(c: &mut Criterion, name: &str, codec: Codec, stage: EntropyStage) {
    let tensors: Vec<Vec<f32>> = (0..4).map(|s| gradient_like(SMALL, s)).collect();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes((SMALL * 4) as u64));
    let mut encoder = make_encoder(codec, stage);
    let mut frame = Vec::with_capacity(SMALL * 4 + 64);
    let mut step = 0;
    bench_encode(
        &mut group,
        "512K",
        &mut encoder,
        &tensors,
        &mut frame,
        &mut step,
    );
    bench_decode(&mut group, "512K", codec, stage, &tensors, &mut frame);
    group.finish();
}

/// The `encode` benchmark at `size`: `encoder` on `tensors` in turn, from
/// where `step` left off.
fn bench_encode(
    group: &mut BenchmarkGroup<'_, WallTime>,
    size: &str,
    encoder: &mut Encoder,
    tensors: &[Vec<f32>],
    frame: &mut Vec<u8>,
    step: &mut usize,
) {
    group.bench_function(BenchmarkId::new("encode", size), |b| {
        b.iter(|| {
            frame.clear();
            *step = (*step + 1) % tensors.len();
            encoder
                .encode(black_box(&tensors[*step]), frame)
                .expect("encodes");
        })
    });
}

/// The `decode` benchmark at `size`: a frame from a fixed point of the
/// stream (the 8th tensor through a fresh context), not whatever the
/// encode loop left in `frame`.
fn bench_decode(
    group: &mut BenchmarkGroup<'_, WallTime>,
    size: &str,
    codec: Codec,
    stage: EntropyStage,
    tensors: &[Vec<f32>],
    frame: &mut Vec<u8>,
) {
    let mut fresh = make_encoder(codec, stage);
    for step in 0..8 {
        frame.clear();
        fresh
            .encode(&tensors[step % tensors.len()], frame)
            .expect("encodes");
    }
    let mut out = vec![0f32; tensors[0].len()];
    group.bench_function(BenchmarkId::new("decode", size), |b| {
        b.iter(|| {
            let parsed =
                Frame::parse(black_box(frame.as_slice()), &Limits::default()).expect("parses");
            parsed.decode_into(&mut out).expect("decodes");
        })
    });
}

fn bench(c: &mut Criterion) {
    let tensors: Vec<Vec<f32>> = (0..4).map(|s| gradient_like(ELEMENTS, s)).collect();
    let bytes = (ELEMENTS * 4) as u64;

    let mut group = c.benchmark_group("memcpy");
    group.throughput(Throughput::Bytes(bytes));
    let mut copy = vec![0f32; ELEMENTS];
    group.bench_function("4M", |b| {
        b.iter(|| copy.copy_from_slice(black_box(&tensors[0])))
    });
    group.finish();

    for (name, codec, stage) in codecs() {
        if let Codec::ThreeLc { .. } = codec {
            bench_small(c, &format!("{name}_512K"), codec, stage);
        }
        let mut group = c.benchmark_group(name.as_str());
        group.throughput(Throughput::Bytes(bytes));
        group.sample_size(20);
        let mut encoder = make_encoder(codec, stage);
        let mut frame = Vec::with_capacity(ELEMENTS * 4 + 64);
        let mut step = 0;
        bench_encode(
            &mut group,
            "4M",
            &mut encoder,
            &tensors,
            &mut frame,
            &mut step,
        );
        if let Codec::ThreeLc { .. } = codec {
            // A refinement pass toward a goal (`encode_pass`): a histogram pass picks
            // the scale, then the usual two. Half the squared error may stay.
            let allowed: f64 = tensors[0]
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>()
                * 0.5;
            group.bench_function(BenchmarkId::new("encode_toward", "4M"), |b| {
                b.iter(|| {
                    frame.clear();
                    step = (step + 1) % tensors.len();
                    encoder
                        .encode_pass(black_box(&tensors[step]), Some(allowed), &mut frame)
                        .expect("encodes");
                })
            });
        }
        bench_decode(&mut group, "4M", codec, stage, &tensors, &mut frame);
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
