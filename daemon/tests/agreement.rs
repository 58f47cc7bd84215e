//! The fidelity controller's agreement signal end to end: one parameter
//! task's sidecar asks two workers' sidecars for their gradients of a
//! synchronous step, measures how much the decoded pushes agree, and says
//! so in its next requests (`tlc-agree`); each worker's sidecar holds the
//! tight push bound while the workers agree and the calm one once they do
//! not.

mod support;

use std::sync::Arc;

use support::tf::{recv, start_tensor_server, Tensors};
use support::{teach, Client};
use tlc_core::Role;
use tlc_core::TensorKey;
use tlc_sidecar::policy::Policy;
use tlc_sidecar::Sidecar;
use tlc_wire::graph::build::PartitionBuilder;

const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
const PS_TASK: &str = "/job:ps/replica:0/task:0";
const WORKERS: [(&str, &str, u32); 2] = [
    (
        "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:worker/replica:0/task:0",
        12,
    ),
    (
        "/job:worker/replica:0/task:1/device:CPU:0",
        "/job:worker/replica:0/task:1",
        14,
    ),
];
const TENSOR: &str = "gradients/dense/MatMul_grad/MatMul_1";
/// Steps the workers agree for, then as many they oppose each other.
const PHASE: i64 = 15;

/// Worker `w`'s gradient at `step`: the same for both in the first
/// phase, opposed in the second.
fn gradient(w: usize, step: i64) -> Vec<f32> {
    let sign = if w == 1 && step >= PHASE { -1.0 } else { 1.0 };
    (0..20_000)
        .map(|i| {
            let x = (i as f32 * 0.618 + step as f32 * 1.7).sin();
            sign * x * x * x * 1e-3
        })
        .collect()
}

fn settings() -> tlc_sidecar::policy::PolicySettings {
    let mut settings = support::compressing_settings();
    settings.refine.push_max_lag = 1.0;
    let critical = &mut settings.refine.critical;
    critical.push_max_lag = 0.5;
    critical.change = f64::INFINITY;
    critical.window = 5;
    critical.agreement = 0.2;
    settings
}

/// What worker `w`'s sidecar holds of the stream: the agreement it last
/// heard and whether its next push is critical.
fn heard(holder: &Sidecar, w: usize) -> (Option<f64>, Option<bool>) {
    let key = TensorKey {
        holder: WORKERS[w].1.into(),
        requester: PS_TASK.into(),
        tensor: TENSOR.into(),
    };
    holder
        .inspect_push_context(&key, |c| (c.counters().agreement, c.counters().critical))
        .expect("a push context")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_keep_the_tight_bound_while_workers_agree_and_loosen_it_after() {
    let policy = || Policy::new(&settings()).unwrap();
    let requester = Arc::new(support::compressing_sidecar());
    requester.set_policy(policy());
    let mut holders = Vec::new();
    let mut clients = Vec::new();
    let mut proxies = Vec::new();
    for (w, &(_, task, edge)) in WORKERS.iter().enumerate() {
        let tensors: Tensors =
            Arc::new(move |_key: &str, step: i64| (vec![100, 200], gradient(w, step)));
        let server = start_tensor_server(tensors).await;
        let holder = Arc::new(support::compressing_sidecar());
        holder.set_policy(policy());
        let graph = PartitionBuilder::new(PS_TASK).accumulated_gradient(
            "dense/kernel",
            &format!("edge_{edge}_{TENSOR}"),
            task,
        );
        teach(&holder, graph.clone());
        teach(&requester, graph);
        let inbound = support::proxy(Role::Inbound, server, holder.clone()).await;
        let outbound =
            support::proxy(Role::Outbound, inbound.local_addrs()[0], requester.clone()).await;
        clients.push(Client::connect(outbound.local_addrs()[0]).await);
        holders.push(holder);
        proxies.push((outbound, inbound));
    }
    let keys: Vec<String> = WORKERS
        .iter()
        .map(|(device, _, edge)| format!("{device};0000000000000001;{PS};edge_{edge}_{TENSOR};0:0"))
        .collect();
    let mut heard_by_step = Vec::new();
    for step in 0..2 * PHASE {
        for w in 0..2 {
            let got = recv(&clients[w], &keys[w], step).await;
            assert!(got.headers.keys().all(|k| !k.as_str().starts_with("tlc-")));
            assert_eq!(got.values.len(), 20_000);
        }
        heard_by_step.push((heard(&holders[0], 0), heard(&holders[1], 1)));
    }
    // Nothing to say before a window of rounds: critical, as before any
    // controller.
    assert_eq!(heard_by_step[0].0, (None, Some(true)));
    // Agreeing (identical gradients decode identically): critical.
    let (agreeing, agreeing_other) = heard_by_step[PHASE as usize - 1];
    assert!(agreeing.0.is_some_and(|a| a > 0.99), "{agreeing:?}");
    assert_eq!(agreeing.1, Some(true));
    assert_eq!(agreeing_other.1, Some(true));
    // Opposed for three windows (their error buffers, built while they
    // agreed, keep the decoded pushes from opposing exactly): calm on
    // both workers.
    let (opposed, opposed_other) = heard_by_step[2 * PHASE as usize - 1];
    assert!(opposed.0.is_some_and(|a| a < -0.5), "{opposed:?}");
    assert_eq!(opposed.1, Some(false));
    assert_eq!(opposed_other.1, Some(false));
    drop(proxies);
}
