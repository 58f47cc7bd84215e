//! The link decision (`[policy.link]`) through a real sidecar pair: a
//! tensor crosses raw where its link is faster than compressing it and
//! compressed where it is not, switching either way without breaking its
//! memory; the requester times its link from the answers and tells the
//! holder; and originals kept for fallbacks go once their envelope is
//! acknowledged.

mod support;

use std::sync::Arc;

use support::metrics::{holder_with, key, pair, Pair};
use support::teach;
use support::tf::{recv, start_tensor_server, Tensors};
use tlc_sidecar::policy::{LinkMode, LinkSettings, Policy, PolicySettings};
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;
use tlc_wire::peer;

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const WORKER_TASK: &str = "/job:worker/replica:0/task:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";

/// Values of `n` elements that change every step.
fn values(n: usize, step: i64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.37 + step as f32 * 1.3).sin()) * 0.01)
        .collect()
}

fn tensors(n: usize) -> Tensors {
    Arc::new(move |_key: &str, step: i64| (vec![n as u64], values(n, step)))
}

/// A policy assuming every link runs at `mbit` Mbit/s (0: measure).
fn at_rate(mbit: u64) -> PolicySettings {
    PolicySettings {
        link: LinkSettings {
            mode: LinkMode::Auto,
            assume_rate_mbit: mbit,
            ..LinkSettings::default()
        },
        ..PolicySettings::default()
    }
}

fn set_rate(sidecar: &Sidecar, mbit: u64) {
    sidecar.set_policy(Policy::new(&at_rate(mbit)).unwrap());
}

fn passed(sidecar: &Sidecar, reason: &str) -> u64 {
    sidecar
        .stats()
        .totals()
        .passed
        .get(reason)
        .copied()
        .unwrap_or(0)
}

/// A sidecar pair in front of a server of `n`-value tensors, `holder`
/// on the holding side, taught `partition`.
async fn path_to(n: usize, holder: Arc<Sidecar>, partition: PartitionBuilder) -> Pair {
    let server = start_tensor_server(tensors(n)).await;
    let path = pair(server, holder.clone()).await;
    teach(&holder, partition);
    path
}

/// The partition graph of a ps that receives one dense gradient from the
/// worker (`layer/grad`, edge 5).
fn gradient() -> PartitionBuilder {
    PartitionBuilder::new(PS_TASK).dense_gradient("layer", "edge_5_layer/grad", WORKER_TASK)
}

fn l2(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let diff: Vec<f32> = got.iter().zip(want).map(|(a, b)| a - b).collect();
    l2(&diff) / l2(want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gradient_crosses_raw_on_a_fast_link_and_compressed_on_a_slow_one() {
    const N: usize = 256 << 10;
    // 1 Tbit/s: far above any codec's break-even.
    let holder = holder_with(&at_rate(1_000_000));
    let path = path_to(N, holder.clone(), gradient()).await;
    let grad = key(WORKER, PS, 5, "layer/grad");
    let mut raw = 0;
    let mut pushed = vec![0f64; N];
    let mut arrived = vec![0f64; N];
    for step in 0..70 {
        let got = recv(&path.client, &grad, step).await;
        let gradient = values(N, step);
        if got.values == gradient {
            raw += 1;
        }
        for i in 0..N {
            pushed[i] += f64::from(gradient[i]);
            arrived[i] += f64::from(got.values[i]);
        }
    }
    // The first is compressed (its costs are not known yet) and the next
    // carries the error it left, exactly; then raw, but for a probe
    // (compressed) and the call after it (exact again).
    assert_eq!(passed(&holder, "link_fast"), 66);
    assert_eq!(raw, 66, "every tensor sent raw arrives as it was");
    assert_eq!(holder.link_view().settled, 2);
    // So what arrived adds up to what was pushed: no error waits.
    let missing: Vec<f32> = pushed
        .iter()
        .zip(&arrived)
        .map(|(p, a)| (p - a) as f32)
        .collect();
    let pushed: Vec<f32> = pushed.iter().map(|p| *p as f32).collect();
    assert!(
        l2(&missing) / l2(&pushed) < 1e-5,
        "{}",
        l2(&missing) / l2(&pushed)
    );
    let rows = holder.tensors();
    let row = rows.iter().find(|r| r.side == "holder").unwrap();
    assert_eq!(row.link.as_deref(), Some("pass"), "{row:?}");
    assert!(row.break_even_rate.unwrap() < 125e9 / 3.0);
    assert_eq!(holder.link_view().switched_to_raw, 1);

    // 1 Mbit/s: compressed again from the next call on.
    set_rate(&holder, 1);
    for step in 70..75 {
        let got = recv(&path.client, &grad, step).await;
        assert_ne!(got.values, values(N, step), "compressed");
    }
    assert_eq!(passed(&holder, "link_fast"), 66);
    assert_eq!(holder.link_view().switched_to_compressed, 1);
    let rows = holder.tensors();
    let row = rows.iter().find(|r| r.side == "holder").unwrap();
    assert_eq!(row.link.as_deref(), Some("compress"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_replica_survives_a_stretch_of_raw_answers() {
    const N: usize = 128 << 10;
    let holder = holder_with(&at_rate(1));
    let path = path_to(
        N,
        holder.clone(),
        // A model trained here (so its reads go through a replica).
        PartitionBuilder::new(PS_TASK)
            .dense_read("w", "edge_3_w/read", WORKER_TASK)
            .dense_gradient("w", "edge_4_w/grad", WORKER_TASK),
    )
    .await;
    let read = key(PS, WORKER, 3, "w/read");
    for step in 0..5 {
        let got = recv(&path.client, &read, step).await;
        assert!(rel_l2(&got.values, &values(N, step)) < 0.011);
    }
    set_rate(&holder, 1_000_000);
    for step in 5..15 {
        let got = recv(&path.client, &read, step).await;
        assert_eq!(got.values, values(N, step), "raw: exact");
    }
    // Back to compressed: the first answer settles the replica the
    // requester kept from step 4 onto the model, exactly; the deltas
    // start from there.
    set_rate(&holder, 1);
    let got = recv(&path.client, &read, 15).await;
    let off = rel_l2(&got.values, &values(N, 15));
    assert!(got.values == values(N, 15), "settled: exact, not {off} off");
    assert_eq!(holder.link_view().settled, 1);
    assert_eq!(passed(&holder, "link_fast"), 10);
    for step in 16..20 {
        let got = recv(&path.client, &read, step).await;
        assert!(
            rel_l2(&got.values, &values(N, step)) < 0.011,
            "step {step}: {}",
            rel_l2(&got.values, &values(N, step))
        );
    }
    assert_eq!(holder.stats().totals().decode_failures, 0);
    assert_eq!(path.requester.stats().totals().decode_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requester_times_its_link_from_a_raw_answer_and_tells_the_holder() {
    // 128 KiB: a size the holder sends raw now and then while no rate is
    // known, so that the requester can time the link.
    const N: usize = 32 << 10;
    let holder = holder_with(&at_rate(0));
    let path = path_to(N, holder.clone(), gradient()).await;
    let grad = key(WORKER, PS, 5, "layer/grad");
    assert!(path.requester.link_view().rates.is_empty());
    // Compressed (costs unknown), then as large as raw to explore (the
    // gradient with the error the first call left, exactly), then one
    // more that closes that answer's burst on the requester's side.
    for step in 0..3 {
        recv(&path.client, &grad, step).await;
    }
    // One, unless the machine took 2 s for a call (then two: the same).
    assert!(holder.link_view().settled >= 1);
    let rates = path.requester.link_view().rates;
    assert_eq!(rates.len(), 1, "{rates:?}");
    assert_eq!(rates[0].peer, WORKER_TASK);
    // The next request carries the rate; the holder decides with it.
    recv(&path.client, &grad, 3).await;
    let rows = holder.tensors();
    let row = rows.iter().find(|r| r.side == "holder").unwrap();
    let told = row.link_rate.unwrap();
    assert!(
        (told - rates[0].bytes_per_second.floor()).abs() <= 1.0,
        "{told} against {rates:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn originals_go_once_the_requester_acknowledges_their_envelope() {
    const N: usize = 64 << 10;
    let holder = Arc::new(support::compressing_sidecar());
    let path = path_to(N, holder.clone(), gradient()).await;
    let grad = key(WORKER, PS, 5, "layer/grad");
    for step in 0..10 {
        let got = recv(&path.client, &grad, step).await;
        assert!(!got.headers.contains_key(peer::ENVELOPE));
    }
    // Each call acknowledged the envelope before it: only the last waits.
    assert_eq!(holder.fallbacks_kept().0, 1);
    assert_eq!(holder.stats().totals().fallbacks_released, 9);
}
