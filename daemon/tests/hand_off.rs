//! A connection the proxy closes loses nothing it has sent: when a
//! successor takes the sockets over (or the drain time is up), every call
//! in progress gets the whole of its response, however slowly the client
//! reads it and whatever the client sends meanwhile.
//!
//! Before the proxy closed connections with a lingering close, a client
//! that was still reading the end of a response when the proxy closed
//! the socket sent a WINDOW_UPDATE to a closed socket, the kernel answered
//! with a reset, and the bytes still queued were lost: "Connection reset
//! by peer" in TensorFlow, as in one CI run of the ps's take-over.

mod support;

use std::time::Duration;

use support::slow::{large_answers, SlowClient};
use tlc_daemon::config::{Config, Role, Route};
use tlc_daemon::proxy::Proxy;

/// Bytes of each answer.
const SIZE: usize = 2 << 20;

async fn proxy(upstream: std::net::SocketAddr) -> Proxy {
    let config = Config {
        routes: vec![Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
            role: Role::Outbound,
        }],
        drain_seconds: 30,
        ..Default::default()
    };
    Proxy::start(&config, Default::default()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_leaves_a_slow_client_every_byte_of_its_calls() {
    let upstream = large_answers(SIZE).await;
    let mut failures = Vec::new();
    for round in 0..3 {
        let proxy = proxy(upstream).await;
        let client = SlowClient::connect(proxy.local_addrs()[0], 16 << 10).await;
        let calls: Vec<_> = (0..4).map(|_| client.call()).collect();
        // Every call is under way, with most of its answer still to come.
        client.wait_for(256 << 10).await;
        let handing = tokio::spawn(proxy.hand_off());
        for call in calls {
            match call.await.unwrap() {
                Ok(len) => assert_eq!(len, SIZE),
                Err(err) => failures.push(format!("round {round}: {err}")),
            }
        }
        tokio::time::timeout(Duration::from_secs(30), handing)
            .await
            .expect("the old proxy never finished")
            .unwrap();
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
