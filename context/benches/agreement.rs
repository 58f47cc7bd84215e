//! The agreement meter's cost per push on the parameter task's sidecar,
//! against a copy of the same tensor (what decoding it costs at least).
//!
//! `cargo bench -p tlc-context --bench agreement`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tlc_context::AgreementMeter;

/// A 1024 x 1024 weight matrix's gradient.
const ELEMENTS: usize = 1 << 20;

fn values(seed: usize) -> Vec<f32> {
    (0..ELEMENTS)
        .map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) * 1e-6)
        .collect()
}

fn agreement(c: &mut Criterion) {
    let (a, b) = (values(1), values(2));
    let mut group = c.benchmark_group("agreement");
    group.throughput(Throughput::Bytes(4 * ELEMENTS as u64));
    group.bench_function("copy", |bench| {
        let mut out = vec![0.0f32; ELEMENTS];
        bench.iter(|| out.copy_from_slice(black_box(&a)));
    });
    group.bench_function("observe", |bench| {
        let mut meter = AgreementMeter::default();
        // Two workers: one push starts a round (a copy), the other joins
        // it (the measured sum).
        bench.iter(|| {
            meter.observe(1, black_box(&a));
            meter.observe(2, black_box(&b));
        });
    });
    group.finish();
}

criterion_group!(benches, agreement);
criterion_main!(benches);
