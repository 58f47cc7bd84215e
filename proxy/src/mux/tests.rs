//! Both ends of a session over one in-memory HTTP/2 connection, with a
//! handler that answers each call from its path.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::client::Session;
use super::MAX_REQUEST;
use crate::body::{self, ProxyBody};
use crate::connection::{Activity, ConnectionStats};
use crate::handler::Handler;
use crate::listener::session::{self as server, Serving};
use crate::upstream::Upstream;
use tlc_core::Role;

/// Answers `/echo` with the request's message, `/big/N` with N bytes in
/// chunks of 100 KiB, `/slow` with one chunk and then nothing until the
/// caller goes away; counts the calls it saw end.
#[derive(Default)]
struct Toy {
    stats: ConnectionStats,
    ended: Arc<AtomicUsize>,
    /// Body bytes the answers have handed on so far.
    produced: Arc<AtomicUsize>,
}

struct Ends(Arc<AtomicUsize>);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn grpc(message: &[u8]) -> Bytes {
    let mut bytes = super::frame::batch_prefix(message.len()).to_vec();
    bytes.extend_from_slice(message);
    Bytes::from(bytes)
}

/// A body of what arrives on `rx`, ending when it closes.
fn channel_body(rx: tokio::sync::mpsc::Receiver<Bytes>) -> ProxyBody {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(http_body::Frame::data(b)), rx))
    });
    body::stream(http_body_util::StreamBody::new(stream))
}

fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
}

impl Handler for Toy {
    async fn handle(
        self: Arc<Self>,
        _role: Role,
        _upstream: &Upstream,
        request: Request<ProxyBody>,
    ) -> Response<ProxyBody> {
        let path = request.uri().path().to_owned();
        let tag = request.headers().get("x-tag").cloned();
        let data = request
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let ends = Ends(Arc::clone(&self.ended));
        let body = if path == "/echo" {
            body::chunks(vec![data], Some(ok_trailers()))
        } else if let Some(n) = path.strip_prefix("/big/") {
            let n: usize = n.parse().expect("a size");
            let chunk = Bytes::from(vec![7u8; 100 << 10]);
            let mut chunks = vec![chunk; n / (100 << 10)];
            chunks.push(Bytes::from(vec![7u8; n % (100 << 10)]));
            body::chunks_unsized(chunks, Some(ok_trailers()))
        } else {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
            tx.send(Bytes::from_static(b"first")).await.expect("send");
            tokio::spawn(async move {
                tx.closed().await;
            });
            channel_body(rx)
        };
        let produced = Arc::clone(&self.produced);
        let body = body::stream(body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                produced.fetch_add(data.len(), Ordering::SeqCst);
            }
            frame
        }));
        let mut response = Response::new(body::holding(body, ends));
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        if let Some(tag) = tag {
            response.headers_mut().insert("x-tag", tag);
        }
        response
    }

    fn connections(&self) -> &ConnectionStats {
        &self.stats
    }
}

struct Pair {
    session: Session,
    sender: hyper::client::conn::http2::SendRequest<ProxyBody>,
    toy: Arc<Toy>,
    ending: CancellationToken,
    activity: Arc<Activity>,
}

/// A server that serves sessions (if `sessions`) and a client that opened
/// one, over an in-memory connection.
async fn pair(sessions: bool) -> Option<Pair> {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let toy = Arc::new(Toy::default());
    let ending = CancellationToken::new();
    let activity = Arc::new(Activity::default());
    let upstream = Arc::new(Upstream::new(
        "127.0.0.1:9".parse().expect("addr"),
        Role::Inbound,
        None,
        TaskTracker::new(),
    ));
    let (handler, token, calls) = (Arc::clone(&toy), ending.clone(), Arc::clone(&activity));
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let request = request.map(body::stream);
        let response = if sessions && server::is_session(&request) {
            let serving = Serving {
                handler: Arc::clone(&handler),
                role: Role::Inbound,
                upstream: Arc::clone(&upstream),
                activity: Arc::clone(&calls),
                ending: token.clone(),
            };
            server::serve(request, serving)
        } else {
            crate::grpc_status::response(crate::grpc_status::UNIMPLEMENTED, "no such method")
        };
        async move { Ok::<_, Infallible>(response) }
    });
    tokio::spawn(async move {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(server_io), service)
            .await;
    });
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, ProxyBody>(TokioIo::new(client_io))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let session = Session::open(&mut sender, "peer:1")
        .await
        .expect("opened")?;
    Some(Pair {
        session,
        sender,
        toy,
        ending,
        activity,
    })
}

fn call(path: &str, message: &[u8], tag: &str) -> Request<ProxyBody> {
    Request::post(format!("http://peer:1{path}"))
        .header("content-type", "application/grpc")
        .header("x-tag", tag)
        .body(body::full(grpc(message)))
        .expect("a request")
}

async fn whole(response: Response<ProxyBody>) -> (Bytes, Option<HeaderMap>) {
    let collected = response.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

#[tokio::test]
async fn calls_go_and_come_back_whole() {
    let pair = pair(true).await.expect("a session");
    let session = &pair.session;
    let answers = futures_util::future::join_all((0..200).map(|i| async move {
        let message = format!("message {i}").into_bytes();
        let response = session
            .send(call("/echo", &message, &i.to_string()))
            .await
            .unwrap_or_else(|_| panic!("call {i} taken"));
        assert_eq!(response.headers()["x-tag"], i.to_string().as_str());
        let (data, trailers) = whole(response).await;
        assert_eq!(data, grpc(&message));
        assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    }));
    answers.await;
    assert_eq!(pair.toy.ended.load(Ordering::SeqCst), 200);
}

#[tokio::test]
async fn a_large_response_streams_within_its_window_beside_small_calls() {
    let pair = pair(true).await.expect("a session");
    let size = 3 * super::WINDOW as usize + 12345;
    let big = pair
        .session
        .send(call(&format!("/big/{size}"), b"", "big"))
        .await
        .unwrap_or_else(|_| panic!("taken"));
    // A small call is answered while the large body waits to be read.
    let small = pair.session.send(call("/echo", b"hi", "small"));
    let small = tokio::time::timeout(Duration::from_secs(5), small)
        .await
        .expect("the small call is not held behind the large one")
        .unwrap_or_else(|_| panic!("taken"));
    assert_eq!(whole(small).await.0, grpc(b"hi"));
    let (data, trailers) = whole(big).await;
    assert_eq!(data.len(), size);
    assert!(data.iter().all(|&b| b == 7));
    assert!(trailers.is_some());
}

#[tokio::test]
async fn a_dropped_response_cancels_only_its_call() {
    let pair = pair(true).await.expect("a session");
    let slow = pair
        .session
        .send(call("/slow", b"", "slow"))
        .await
        .unwrap_or_else(|_| panic!("taken"));
    let mut body = slow.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().expect("data"), "first");
    assert_eq!(pair.activity.in_flight(), 1);
    drop(body);
    for _ in 0..100 {
        if pair.toy.ended.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        pair.toy.ended.load(Ordering::SeqCst),
        1,
        "the handler's body was dropped"
    );
    assert_eq!(pair.activity.in_flight(), 0);
    // The session goes on, ids reused.
    for _ in 0..3 {
        let response = pair
            .session
            .send(call("/echo", b"again", "x"))
            .await
            .unwrap_or_else(|_| panic!("taken"));
        assert_eq!(whole(response).await.0, grpc(b"again"));
    }
}

#[tokio::test]
async fn going_away_finishes_calls_and_refuses_new_ones() {
    let pair = pair(true).await.expect("a session");
    let slow = pair
        .session
        .send(call("/slow", b"", "slow"))
        .await
        .unwrap_or_else(|_| panic!("taken"));
    pair.ending.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pair.session.is_open());
    let Err(unsent) = pair.session.send(call("/echo", b"x", "late")).await else {
        panic!("a new call comes back unsent");
    };
    assert_eq!(whole_request(unsent).await, grpc(b"x"));
    // The call in progress still delivers what it had.
    let mut body = slow.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.into_data().expect("data"), "first");
}

async fn whole_request(request: Request<ProxyBody>) -> Bytes {
    request
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
}

#[tokio::test]
async fn a_peer_without_sessions_is_told_apart() {
    assert!(pair(false).await.is_none());
}

#[tokio::test]
async fn requests_too_large_or_still_coming_take_their_own_stream() {
    let pair = pair(true).await.expect("a session");
    let large = vec![1u8; MAX_REQUEST + 1];
    let Err(unsent) = pair.session.send(call("/echo", &large, "large")).await else {
        panic!("too large for the session");
    };
    assert_eq!(whole_request(unsent).await, grpc(&large));
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let request = Request::post("http://peer:1/echo")
        .body(channel_body(rx))
        .expect("request");
    let Err(unsent) = pair.session.send(request).await else {
        panic!("still coming");
    };
    tx.send(Bytes::from_static(b"late")).await.expect("send");
    drop(tx);
    assert_eq!(whole_request(unsent).await, "late");
}

#[tokio::test]
async fn a_caller_that_stops_reading_holds_at_most_a_window() {
    let pair = pair(true).await.expect("a session");
    let size = 4 * super::WINDOW as usize;
    let big = pair
        .session
        .send(call(&format!("/big/{size}"), b"", "big"))
        .await
        .unwrap_or_else(|_| panic!("taken"));
    let mut body = big.into_body();
    body.frame().await.expect("a frame").expect("data");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let produced = pair.toy.produced.load(Ordering::SeqCst);
    // A window, and what the answer's last body frame (100 KiB) held.
    let most = super::WINDOW as usize + (100 << 10) + super::CHUNK;
    assert!(
        produced <= most,
        "{produced} bytes read from the answer, at most {most}"
    );
    assert!(produced >= super::WINDOW as usize / 2, "{produced}");
    // Reading on, the rest comes.
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("a frame").into_data() {
            read += data.len();
        }
    }
    assert!(read > size - super::WINDOW as usize);
}

#[tokio::test]
async fn a_peer_that_breaks_the_rules_loses_its_session_not_the_connection() {
    let mut pair = pair(true).await.expect("a session");
    let broken = super::totals().broken;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let request = Request::post(format!("http://peer:1{}", super::frame::PATH))
        .header("content-type", "application/grpc")
        .header(super::ACCEPT_HEADER, "1")
        .body(channel_body(rx))
        .expect("request");
    let response = pair.sender.send_request(request).await.expect("answered");
    assert!(response.headers().contains_key(super::ACCEPT_HEADER));
    // A request's head without its end: not a whole request.
    let frame = [0x01, 0x01, 0x00, 0x00];
    let mut batch = super::frame::batch_prefix(frame.len()).to_vec();
    batch.extend_from_slice(&frame);
    tx.send(Bytes::from(batch)).await.expect("sent");
    let ended = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect()).await;
    assert!(ended.is_ok(), "the session ended");
    assert!(super::totals().broken > broken);
    // The other session, on the same connection, goes on.
    let answer = pair
        .session
        .send(call("/echo", b"still", "x"))
        .await
        .unwrap_or_else(|_| panic!("taken"));
    assert_eq!(whole(answer).await.0, grpc(b"still"));
}

#[test]
fn a_small_call_in_a_large_batch_holds_its_own_bytes_not_the_batch() {
    use super::frame::{Frame, Part, Tables};
    let head = |value: &str| {
        Some(vec![
            (Bytes::from_static(b":path"), Bytes::from_static(b"/x")),
            (
                Bytes::from_static(b"tag"),
                Bytes::copy_from_slice(value.as_bytes()),
            ),
        ])
    };
    let small = Part {
        head: head("small"),
        data: Some(Bytes::from(vec![1u8; 100])),
        end: true,
        ..Part::default()
    };
    let large = Part {
        head: head("large"),
        data: Some(Bytes::from(vec![2u8; 2 * super::COMPACT_ABOVE])),
        end: true,
        ..Part::default()
    };
    for (parts, compacted) in [(vec![small.clone()], false), (vec![small, large], true)] {
        let mut out = bytes::BytesMut::new();
        let mut writer = Tables::default();
        for (id, part) in parts.iter().enumerate() {
            writer.write(&Frame::Call(id as u32, part.clone()), &mut out);
        }
        let batch = out.freeze();
        let range = batch.as_ptr() as usize..batch.as_ptr() as usize + batch.len();
        let inside = |b: &Bytes| range.contains(&(b.as_ptr() as usize));
        let mut read = Vec::new();
        super::read_batch(&mut Tables::default(), batch.clone(), &mut |frame| {
            read.push(frame);
            Ok(())
        })
        .expect("read");
        let Frame::Call(_, first) = &read[0] else {
            panic!("{:?}", read[0])
        };
        assert_eq!(first, &parts[0], "the same call either way");
        let pieces = first.head.iter().flatten().flat_map(|(n, v)| [n, v]);
        let data = first.data.as_ref().expect("data");
        // A batch of small calls is read where it lies; in a large one,
        // a small call's bytes are its own.
        assert_eq!(inside(data), !compacted);
        assert!(pieces
            .filter(|b| !b.is_empty())
            .all(|b| inside(b) != compacted));
        if let Some(Frame::Call(_, second)) = read.get(1) {
            assert!(
                inside(second.data.as_ref().expect("data")),
                "the large piece is not copied"
            );
        }
    }
}
