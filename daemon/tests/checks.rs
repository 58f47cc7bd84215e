//! `[policy.check]` through real sidecars: the mirror check matches on
//! every compressed answer, pulls and pushes, across switches between
//! raw and compressed; a holder whose hash disagrees gets TensorFlow the
//! original, loudly; and `exact_at_call` sends that one call exactly.

mod support;

use std::sync::Arc;

use http::{HeaderMap, Request};
use hyper::body::Incoming;
use support::metrics::{holder_with, key, pair, Pair};
use support::teach;
use support::tf::{envelope_body, recv, response_body, start_tensor_server, Tensors};
use tlc_codec::{Codec, EntropyStage, Limits, Sparsity};
use tlc_context::{decode_push, encode_stateless, replica_hash};
use tlc_core::Role;
use tlc_sidecar::policy::{CheckSettings, LinkMode, LinkSettings, Policy, PolicySettings};
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;
use tlc_wire::peer;

const WORKER: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const WORKER_TASK: &str = "/job:worker/replica:0/task:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";
const N: usize = 64 << 10;

/// Values of `N` elements that change every step.
fn values(step: i64) -> Vec<f32> {
    (0..N)
        .map(|i| ((i as f32 * 0.37 + step as f32 * 1.3).sin()) * 0.01)
        .collect()
}

fn with_check(check: CheckSettings, link: LinkSettings) -> PolicySettings {
    PolicySettings {
        check,
        link,
        ..PolicySettings::default()
    }
}

fn always() -> LinkSettings {
    LinkSettings {
        mode: LinkMode::Always,
        ..LinkSettings::default()
    }
}

/// Every link taken to run at `mbit` Mbit/s under `auto`.
fn at_rate(mbit: u64) -> LinkSettings {
    LinkSettings {
        mode: LinkMode::Auto,
        assume_rate_mbit: mbit,
        ..LinkSettings::default()
    }
}

const MIRROR: CheckSettings = CheckSettings {
    mirror: true,
    exact_at_call: 0,
};

/// A sidecar pair in front of a model of one variable `w` read by the
/// worker and its gradient pushed, `holder` on the holding side.
async fn model_path(holder: Arc<Sidecar>) -> Pair {
    let tensors: Tensors = Arc::new(|_key: &str, step: i64| (vec![N as u64], values(step)));
    let server = start_tensor_server(tensors).await;
    let path = pair(server, holder.clone()).await;
    teach(
        &holder,
        PartitionBuilder::new(PS_TASK)
            .dense_read("w", "edge_3_w/read", WORKER_TASK)
            .dense_gradient("w", "edge_4_w/grad", WORKER_TASK),
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_matches_every_compressed_answer_across_raw_stretches() {
    let holder = holder_with(&with_check(CheckSettings::default(), at_rate(1)));
    let path = model_path(holder.clone()).await;
    path.requester
        .set_policy(Policy::new(&with_check(MIRROR, always())).unwrap());
    let read = key(PS, WORKER, 3, "w/read");
    let grad = key(WORKER, PS, 4, "w/grad");
    // Compressed, raw (a fast link), compressed again: the call after the
    // raw stretch settles, and the checks go on matching.
    for (steps, mbit) in [(0..4, 1), (4..8, 1_000_000), (8..12, 1)] {
        holder
            .set_policy(Policy::new(&with_check(CheckSettings::default(), at_rate(mbit))).unwrap());
        for step in steps {
            recv(&path.client, &read, step).await;
            recv(&path.client, &grad, step).await;
        }
    }
    let totals = path.requester.stats().totals();
    assert_eq!(totals.mirror_mismatches, 0);
    assert_eq!(totals.decode_failures, 0);
    // 8 compressed steps, a pull and a push each (and a probe during the
    // raw stretch), every one checked.
    assert!(totals.restored >= 16, "{totals:?}");
    assert_eq!(totals.mirror_matches, totals.restored, "{totals:?}");
    assert!(holder.link_view().settled >= 1);
}

/// A holder sidecar stand-in: every RecvTensor gets `envelope` with
/// `tlc-mirror: hash`; a fallback gets the original, ones.
async fn holder_claiming(envelope: Vec<u8>, hash: u64) -> std::net::SocketAddr {
    let body = envelope_body(&[N as u64], envelope);
    support::serve(Arc::new(move |request: Request<Incoming>| {
        let body = body.clone();
        Box::pin(async move {
            if request.uri().path() == peer::FALLBACK_PATH {
                let original = response_body(&[N as u64], &vec![1.0; N]);
                return support::grpc_response(original, HeaderMap::new());
            }
            let mut response = support::grpc_response(body, HeaderMap::new());
            let headers = response.headers_mut();
            headers.insert(peer::ENVELOPE, peer::PROTOCOL.parse().unwrap());
            headers.insert(peer::MIRROR, peer::mirror_header(hash));
            response
        })
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_that_disagrees_gets_tensorflow_the_original() {
    let codec = Codec::ThreeLc {
        sparsity: Sparsity::ONE,
    };
    let mut envelope = Vec::new();
    encode_stateless(&values(1), codec, EntropyStage::Off, 7, &mut envelope).unwrap();
    let mut decoded = Vec::new();
    let limits = Limits {
        max_elements: N as u64,
    };
    decode_push(&envelope, &limits, &mut decoded).unwrap();
    let right = replica_hash(&decoded);
    let grad = key(WORKER, PS, 4, "w/grad");
    for (hash, matched) in [(right, true), (right ^ 1, false)] {
        let requester = Arc::new(Sidecar::new(
            Policy::new(&with_check(MIRROR, always())).unwrap(),
            Default::default(),
            None,
        ));
        let holder = holder_claiming(envelope.clone(), hash).await;
        let proxy = support::proxy(Role::Outbound, holder, requester.clone()).await;
        let client = support::Client::connect(proxy.local_addrs()[0]).await;
        let got = recv(&client, &grad, 1).await;
        let totals = requester.stats().totals();
        if matched {
            assert_eq!(got.values, decoded, "the envelope's values");
            assert_eq!((totals.mirror_matches, totals.mirror_mismatches), (1, 0));
        } else {
            assert_eq!(
                got.values,
                vec![1.0; N],
                "the original, through the fallback"
            );
            assert_eq!((totals.mirror_matches, totals.mirror_mismatches), (0, 1));
            assert_eq!(totals.fallbacks, 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_at_call_sends_that_call_exactly_and_only_it() {
    let check = CheckSettings {
        mirror: true,
        exact_at_call: 3,
    };
    let holder = holder_with(&with_check(check, always()));
    let path = model_path(holder.clone()).await;
    path.requester
        .set_policy(Policy::new(&with_check(MIRROR, always())).unwrap());
    let read = key(PS, WORKER, 3, "w/read");
    let grad = key(WORKER, PS, 4, "w/grad");
    let mut pushed = vec![0f64; N];
    let mut arrived = vec![0f64; N];
    for step in 0..5 {
        let model = recv(&path.client, &read, step).await;
        let gradient = recv(&path.client, &grad, step).await;
        for (i, value) in values(step).into_iter().enumerate() {
            pushed[i] += f64::from(value);
            arrived[i] += f64::from(gradient.values[i]);
        }
        let owed = pushed
            .iter()
            .zip(&arrived)
            .map(|(p, a)| (p - a).abs())
            .fold(0.0, f64::max);
        if step == 2 {
            // The third call: the model itself, and the gradient with
            // everything the error buffer held.
            assert_eq!(model.values, values(step));
            assert!(owed < 1e-6, "owed {owed}");
        } else {
            assert_ne!(model.values, values(step), "step {step}: 3LC");
            assert!(owed > 1e-4, "step {step}: owed {owed}");
        }
    }
    assert_eq!(
        holder.stats().totals().forced_exact,
        2,
        "one pull, one push"
    );
    assert_eq!(path.requester.stats().totals().mirror_mismatches, 0);
}
