//! An envelope that fails its checks never reaches TensorFlow: the
//! requester's sidecar fetches the original response from the holder's.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::StreamBody;
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::tf::{recv, response_body};
use support::Client;
use tlc_codec::{Codec, Feedback, Sparsity};
use tlc_daemon::config::Role;
use tlc_daemon::context::PushContext;
use tlc_daemon::peer;
use tlc_daemon::proxy::Proxy;
use tlc_daemon::sidecar::stats::Stats;
use tlc_daemon::sidecar::Sidecar;
use tlc_daemon::tf::proto::DataType;
use tlc_daemon::tf::recv_tensor::{self, ResponseMeta};
use tokio::net::TcpListener;

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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| async move {
                    let path = request.uri().path().to_owned();
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    let mut response_headers = HeaderMap::new();
                    response_headers.insert("content-type", "application/grpc".parse().unwrap());
                    let body = if path == peer::FALLBACK_PATH {
                        assert_eq!(request.headers()[peer::FALLBACK], format!("{TOKEN:x}"));
                        if !fallback_works {
                            trailers.insert("grpc-status", "5".parse().unwrap());
                            Bytes::new()
                        } else {
                            response_body(&[N as u64], &gradient())
                        }
                    } else {
                        assert!(peer::is_peer(request.headers()));
                        response_headers.insert(peer::ENVELOPE, peer::PROTOCOL.parse().unwrap());
                        broken_envelope_body()
                    };
                    let frames = vec![
                        Ok::<_, Infallible>(Frame::data(body)),
                        Ok(Frame::trailers(trailers)),
                    ];
                    let mut response =
                        Response::new(StreamBody::new(futures_util::stream::iter(frames)));
                    *response.headers_mut() = response_headers;
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn requester_to(holder: SocketAddr) -> (Arc<Sidecar>, Proxy, Client) {
    let sidecar = Arc::new(Sidecar::default());
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
    assert_eq!(Stats::get(&sidecar.stats.decode_failures), 1);
    assert_eq!(Stats::get(&sidecar.stats.fallbacks), 1);
    assert_eq!(Stats::get(&sidecar.stats.restored), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_original_the_call_fails_cleanly() {
    let (sidecar, _proxy, client) = requester_to(start_broken_holder(false).await).await;
    let request = support::tf::request_body(KEY, 1);
    let reply = client
        .call(tlc_daemon::tf::RECV_TENSOR_PATH, &[], request)
        .await;
    // A gRPC error status on this one call; no tensor, no envelope.
    assert_eq!(reply.headers["grpc-status"], "14");
    assert!(reply.body.is_empty());
    assert_eq!(Stats::get(&sidecar.stats.decode_failures), 1);
}
