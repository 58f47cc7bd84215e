//! Two sidecars share one session per connection (`peer_sessions`, on by
//! default): once the peer has answered as a sidecar, TensorFlow's calls cross as frames of
//! it, large tensors included, and arrive as they would on streams of
//! their own; with sessions off, every call takes a stream.
//!
//! The session counters are the process's; this file is its own test
//! binary, and its tests run one after the other (a lock), so each reads
//! only its own calls.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::metrics::key;
use support::tf::{recv, start_tensor_server, Tensors};
use support::Client;
use tlc_core::Role;

const WORKER0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn values(n: usize, step: i64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32) * 0.37 + step as f32).sin())
        .collect()
}

struct Counts {
    opened: u64,
    calls: u64,
    unsent: u64,
    data: u64,
}

fn counts() -> Counts {
    let c = tlc_proxy::mux::totals();
    Counts {
        opened: c.opened,
        calls: c.calls,
        unsent: c.unsent,
        data: c.data_bytes,
    }
}

/// A requester's and a holder's proxy in front of a tensor server that
/// answers `n` values, both with `peer_sessions = sessions`.
async fn pair(n: usize, sessions: bool) -> (Client, Vec<tlc_proxy::Proxy<tlc_sidecar::Sidecar>>) {
    let tensors: Tensors = Arc::new(move |_key: &str, step: i64| (vec![n as u64], values(n, step)));
    let server = start_tensor_server(tensors).await;
    let holder = Arc::new(support::compressing_sidecar());
    let inbound = support::proxy_configured(Role::Inbound, server, holder, |c| {
        c.peer_sessions = sessions
    })
    .await;
    let requester = Arc::new(support::compressing_sidecar());
    let outbound =
        support::proxy_configured(Role::Outbound, inbound.local_addrs()[0], requester, |c| {
            c.peer_sessions = sessions
        })
        .await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    (client, vec![outbound, inbound])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_between_two_sidecars_share_one_session() {
    let _one = ONE_AT_A_TIME.lock().await;
    let before = counts();
    // Large enough to be read in pieces, within the window and past it.
    let n = 3_000_000;
    let (client, _proxies) = pair(n, true).await;
    let key = key(PS, WORKER0, 7, "big/read");
    // The first answer shows the peer is a sidecar; the session opens
    // beside the second call.
    for step in [-2, -1] {
        let got = recv(&client, &key, step).await;
        assert_eq!(got.values, values(n, step));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = 6;
    for step in 1..=calls {
        let got = recv(&client, &key, step).await;
        assert_eq!(got.values, values(n, step), "step {step}");
    }
    let after = counts();
    assert_eq!(
        after.opened - before.opened,
        1,
        "one session for the connection"
    );
    assert_eq!(
        after.calls - before.calls,
        calls as u64,
        "every later call in it"
    );
    assert_eq!(after.unsent, before.unsent);
    assert!(
        after.data - before.data > calls as u64 * n as u64 * 4,
        "the tensors crossed in the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sessions_off_every_call_takes_a_stream() {
    let _one = ONE_AT_A_TIME.lock().await;
    let before = counts();
    let n = 1000;
    let (client, _proxies) = pair(n, false).await;
    let key = key(PS, WORKER0, 7, "small/read");
    for step in 0..5 {
        let got = recv(&client, &key, step).await;
        assert_eq!(got.values, values(n, step));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = counts();
    assert_eq!(after.opened, before.opened);
    assert_eq!(after.calls, before.calls);
}
