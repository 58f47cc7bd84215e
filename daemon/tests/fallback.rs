//! An envelope that fails its checks never reaches TensorFlow: the
//! requester's sidecar fetches the original response from the holder's.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request};
use hyper::body::Incoming;
use support::tf::{recv, response_body};
use support::Client;
use tlc_codec::{Codec, Feedback, Sparsity};
use tlc_context::{PushContext, Refinement};
use tlc_core::Role;
use tlc_proxy::Proxy;
use tlc_sidecar::Sidecar;
use tlc_wire::peer;
use tlc_wire::tf::proto::DataType;
use tlc_wire::tf::recv_tensor::{self, ResponseMeta};

const TOKEN: u64 = 0xfeed;
const N: usize = 40_000;

fn gradient() -> Vec<f32> {
    (0..N).map(|i| ((i as f32) * 0.37).sin() * 1e-3).collect()
}

/// The envelope a holder sidecar would send, with one payload byte broken.
fn broken_envelope_body() -> Bytes {
    let mut context = PushContext::new(
        Codec::ThreeLc {
            sparsity: Sparsity::ONE,
        },
        Feedback::On,
    );
    let mut envelope = Vec::new();
    context
        .encode(
            &gradient(),
            Codec::ThreeLc {
                sparsity: Sparsity::ONE,
            },
            Refinement::OFF,
            TOKEN,
            &mut envelope,
        )
        .unwrap();
    let last = envelope.len() - 6;
    envelope[last] ^= 0x40;
    let meta = ResponseMeta {
        is_dead: false,
        send_start_micros: 1234,
        transport_options: None,
        require_ack: false,
    };
    let built = recv_tensor::build_response_with_content(
        &meta,
        &[N as u64],
        DataType::DtFloat as i32,
        envelope.into(),
    )
    .unwrap();
    built.into_grpc_chunks().unwrap().concat().into()
}

/// A peer that plays the holder's sidecar: broken envelopes, good fallbacks.
async fn start_broken_holder(fallback_works: bool) -> SocketAddr {
    support::serve(Arc::new(move |request: Request<Incoming>| {
        Box::pin(async move {
            if request.uri().path() != peer::FALLBACK_PATH {
                assert!(peer::is_peer(request.headers()));
                let mut response = support::grpc_response(broken_envelope_body(), HeaderMap::new());
                response
                    .headers_mut()
                    .insert(peer::ENVELOPE, peer::PROTOCOL.parse().unwrap());
                return response;
            }
            assert_eq!(request.headers()[peer::FALLBACK], format!("{TOKEN:x}"));
            let mut response =
                support::grpc_response(response_body(&[N as u64], &gradient()), HeaderMap::new());
            if !fallback_works {
                // The original is gone: an empty body and NOT_FOUND.
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", "5".parse().unwrap());
                *response.body_mut() = tlc_proxy::body::chunks(vec![], Some(trailers));
            }
            response
        })
    }))
    .await
}

async fn requester_to(holder: SocketAddr) -> (Arc<Sidecar>, Proxy<Sidecar>, Client) {
    let sidecar = Arc::new(support::compressing_sidecar());
    let proxy = support::proxy(Role::Outbound, holder, sidecar.clone()).await;
    let client = Client::connect(proxy.local_addrs()[0]).await;
    (sidecar, proxy, client)
}

const KEY: &str = "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_3_g;0:0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_envelope_is_replaced_by_the_original() {
    let (sidecar, _proxy, client) = requester_to(start_broken_holder(true).await).await;
    let got = recv(&client, KEY, 1).await;
    assert_eq!(got.values, gradient(), "TF gets the original, exactly");
    let totals = sidecar.stats().totals();
    assert_eq!(totals.decode_failures, 1);
    assert_eq!(totals.fallbacks, 1);
    assert_eq!(totals.restored, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_original_the_call_fails_cleanly() {
    let (sidecar, _proxy, client) = requester_to(start_broken_holder(false).await).await;
    let request = support::tf::request_body(KEY, 1);
    let reply = client
        .call(tlc_wire::tf::RECV_TENSOR_PATH, &[], request)
        .await;
    // A gRPC error status on this one call; no tensor, no envelope.
    assert_eq!(reply.headers["grpc-status"], "14");
    assert!(reply.body.is_empty());
    assert_eq!(sidecar.stats().totals().decode_failures, 1);
}
