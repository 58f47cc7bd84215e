//! The dialling side of a session: calls sent as frames on the stream
//! this sidecar opened to its peer's, their answers handed back as
//! ordinary responses.
//!
//! A call the session does not take (its body not whole and small, the
//! session full, going away or gone before the call's frame was queued,
//! or refused by the peer) comes back unsent, for a stream of its own.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame as BodyFrame};
use http_body_util::BodyExt;
use hyper::client::conn::http2::SendRequest;
use tokio::sync::{mpsc, oneshot};

use super::frame::{self, Frame, Pairs, Part};
use super::{
    count, counters, from_pairs, read_frames, ready_whole, reset, to_pairs, warn_broken, writer,
    Outgoing, SessionError, Unread, ACCEPT_HEADER, MAX_CALLS, MAX_REQUEST, WINDOW,
};
use crate::body::{self, BoxError, ProxyBody};
use crate::grpc_status;

/// An open session to a peer's sidecar.
pub struct Session {
    out: Outgoing,
    calls: Arc<Mutex<Calls>>,
    unread: Arc<Unread>,
    open: Arc<AtomicBool>,
}

/// The calls in progress, by id.
#[derive(Default)]
struct Calls {
    live: HashMap<u32, Live>,
    free: BinaryHeap<Reverse<u32>>,
    next_id: u32,
    generation: u64,
}

struct Live {
    generation: u64,
    state: State,
}

enum State {
    /// Sent; waiting for the response's head.
    Head(oneshot::Sender<Answer>),
    /// The response's body is coming.
    Body(mpsc::UnboundedSender<Piece>),
    /// Cancelled here; waiting for the peer's last frame of it.
    Cancelled,
}

enum Answer {
    Response(Response<ProxyBody>),
    Refused,
    Failed(String),
}

enum Piece {
    Data(Bytes),
    Trailers(HeaderMap),
    Failed(String),
}

impl Calls {
    fn lock(calls: &Mutex<Calls>) -> MutexGuard<'_, Calls> {
        calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The smallest free id, so that ids stay short on the wire.
    fn start(&mut self, state: State) -> (u32, u64) {
        let id = match self.free.pop() {
            Some(Reverse(id)) => id,
            None => {
                self.next_id += 1;
                self.next_id
            }
        };
        self.generation += 1;
        let generation = self.generation;
        self.live.insert(id, Live { generation, state });
        (id, generation)
    }

    fn end(&mut self, id: u32) -> Option<Live> {
        let live = self.live.remove(&id)?;
        self.free.push(Reverse(id));
        Some(live)
    }

    /// Cancels call `id` of `generation` if it is still waiting on the
    /// peer; true if a reset is owed.
    fn cancel(&mut self, id: u32, generation: u64) -> bool {
        match self.live.get_mut(&id) {
            Some(live) if live.generation == generation => {
                let owed = !matches!(live.state, State::Cancelled);
                live.state = State::Cancelled;
                owed
            }
            _ => false,
        }
    }
}

impl Session {
    /// Opens a session on `sender`'s connection to `authority`: `None`
    /// when the peer answered without taking it (it is no sidecar that
    /// knows sessions), an error when the call failed.
    pub async fn open(
        sender: &mut SendRequest<ProxyBody>,
        authority: &str,
    ) -> Result<Option<Session>, hyper::Error> {
        let (out, stream) = writer(None);
        let request = Request::post(format!("http://{authority}{}", frame::PATH))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header(ACCEPT_HEADER, "1")
            .body(stream);
        let Ok(request) = request else {
            return Ok(None);
        };
        let response = sender.send_request(request).await?;
        if response.status() != StatusCode::OK || !response.headers().contains_key(ACCEPT_HEADER) {
            count(&counters().refused);
            return Ok(None);
        }
        count(&counters().opened);
        let session = Session {
            out,
            calls: Arc::default(),
            unread: Arc::default(),
            open: Arc::new(AtomicBool::new(true)),
        };
        let reader = Reader {
            calls: Arc::clone(&session.calls),
            unread: Arc::clone(&session.unread),
            open: Arc::clone(&session.open),
            out: session.out.clone(),
        };
        tokio::spawn(reader.run(body::stream(response.into_body())));
        Ok(Some(session))
    }

    /// Whether new calls may go on the session.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Sends `request` over the session and returns its response, or the
    /// request back, unsent, where the session does not take it.
    pub async fn send(
        &self,
        request: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, Request<ProxyBody>> {
        let sent = self.try_send(request).await;
        count(match sent {
            Ok(_) => &counters().calls,
            Err(_) => &counters().unsent,
        });
        sent
    }

    async fn try_send(
        &self,
        request: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, Request<ProxyBody>> {
        let (parts, body) = request.into_parts();
        if !self.is_open() || parts.method != Method::POST {
            return Err(Request::from_parts(parts, body));
        }
        let (data, trailers) = match ready_whole(body, MAX_REQUEST) {
            Ok(whole) => whole,
            Err(body) => return Err(Request::from_parts(parts, body)),
        };
        let unsent = |parts, data: Bytes, trailers| {
            Request::from_parts(parts, body::chunks_unsized(vec![data], trailers))
        };
        if trailers.is_some() {
            return Err(unsent(parts, data, trailers));
        }
        let (answer, answered) = oneshot::channel();
        let (id, generation) = {
            let mut calls = Calls::lock(&self.calls);
            if calls.live.len() >= MAX_CALLS || !self.is_open() {
                drop(calls);
                return Err(unsent(parts, data, None));
            }
            calls.start(State::Head(answer))
        };
        let mut pending = Pending {
            session: self,
            id,
            generation,
            done: false,
        };
        let part = request_part(&parts, &data);
        if !self.out.data(Frame::Call(id, part)).await {
            pending.forget();
            return Err(unsent(parts, data, None));
        }
        let answer = answered.await;
        pending.done = true;
        match answer {
            Ok(Answer::Response(response)) => Ok(response),
            Ok(Answer::Refused) => Err(unsent(parts, data, None)),
            Ok(Answer::Failed(why)) => Ok(failed(&why)),
            Err(_) => Ok(failed("the session ended")),
        }
    }
}

impl Drop for Session {
    /// The last holder gone (the connection it served has ended): the
    /// stream ends, and with it the session on the peer's side.
    fn drop(&mut self) {
        self.open.store(false, Ordering::SeqCst);
        self.out.finish();
    }
}

fn failed(why: &str) -> Response<ProxyBody> {
    grpc_status::response(
        grpc_status::UNAVAILABLE,
        &format!("tlcd: call over the peer session failed: {why}"),
    )
}

/// The frame of a whole request: its head, and its body without the gRPC
/// prefix where it is one whole message.
fn request_part(parts: &http::request::Parts, data: &Bytes) -> Part {
    let mut pseudo: Pairs = Vec::with_capacity(3);
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    pseudo.push((
        Bytes::from_static(b":path"),
        Bytes::copy_from_slice(path.as_bytes()),
    ));
    if let Some(authority) = parts.uri.authority() {
        pseudo.push((
            Bytes::from_static(b":authority"),
            Bytes::copy_from_slice(authority.as_str().as_bytes()),
        ));
    }
    let (data, grpc) = match frame::single_grpc_message(data) {
        Some(message) => (Some(message), true),
        None => ((!data.is_empty()).then(|| data.clone()), false),
    };
    Part {
        head: Some(to_pairs(pseudo, &parts.headers)),
        data,
        grpc,
        end: true,
        tail: None,
    }
}

/// A call sent and not yet answered: dropped early (the caller gave up),
/// it is cancelled on the peer.
struct Pending<'a> {
    session: &'a Session,
    id: u32,
    generation: u64,
    done: bool,
}

impl Pending<'_> {
    /// The call's frame was never queued: its id is free again.
    fn forget(&mut self) {
        let mut calls = Calls::lock(&self.session.calls);
        if calls.live.get(&self.id).map(|l| l.generation) == Some(self.generation) {
            calls.end(self.id);
        }
        self.done = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let owed = Calls::lock(&self.session.calls).cancel(self.id, self.generation);
        if owed {
            self.session
                .out
                .control(Frame::Reset(self.id, reset::CANCEL));
        }
    }
}

/// What routes the peer's frames to the calls.
struct Reader {
    calls: Arc<Mutex<Calls>>,
    unread: Arc<Unread>,
    open: Arc<AtomicBool>,
    out: Outgoing,
}

impl Reader {
    async fn run(self, stream: ProxyBody) {
        let result = read_frames(stream, &self.unread, |frame| self.route(frame)).await;
        if let Err(err) = &result {
            count(&counters().broken);
            warn_broken(err);
        }
        self.open.store(false, Ordering::SeqCst);
        let mut calls = Calls::lock(&self.calls);
        for (_, live) in calls.live.drain() {
            match live.state {
                State::Head(answer) => {
                    let _ = answer.send(Answer::Failed("the session ended".into()));
                }
                State::Body(pieces) => {
                    let _ = pieces.send(Piece::Failed("the session ended".into()));
                }
                State::Cancelled => {}
            }
        }
        self.out.finish();
    }

    fn route(&self, frame: Frame) -> Result<(), SessionError> {
        match frame {
            Frame::Call(id, part) => self.part(id, part),
            Frame::Reset(id, code) => {
                let Some(live) = Calls::lock(&self.calls).end(id) else {
                    return Ok(());
                };
                match live.state {
                    State::Head(answered) => {
                        let answer = if code == reset::REFUSED {
                            Answer::Refused
                        } else {
                            Answer::Failed(format!("the peer reset it ({code})"))
                        };
                        let _ = answered.send(answer);
                    }
                    State::Body(pieces) => {
                        let _ = pieces.send(Piece::Failed(format!("the peer reset it ({code})")));
                    }
                    State::Cancelled => {}
                }
                Ok(())
            }
            Frame::Credit(..) => Ok(()),
            Frame::GoAway => {
                self.open.store(false, Ordering::SeqCst);
                Ok(())
            }
        }
    }

    fn part(&self, id: u32, part: Part) -> Result<(), SessionError> {
        let mut calls = Calls::lock(&self.calls);
        let Some(live) = calls.live.get_mut(&id) else {
            return Err(SessionError::Protocol("a frame for no call"));
        };
        let generation = live.generation;
        let end = part.end;
        match std::mem::replace(&mut live.state, State::Cancelled) {
            State::Head(answer) => {
                let Some(head) = part.head else {
                    return Err(SessionError::Protocol("a response without its head first"));
                };
                let (pieces, body) = mpsc::unbounded_channel();
                self.pieces(&pieces, part.data, part.grpc, part.tail);
                let response = response(head, self, id, generation, body)?;
                if end {
                    calls.end(id);
                } else {
                    live.state = State::Body(pieces);
                }
                drop(calls);
                let _ = answer.send(Answer::Response(response));
            }
            State::Body(pieces) => {
                if part.head.is_some() {
                    return Err(SessionError::Protocol("a second head"));
                }
                self.pieces(&pieces, part.data, part.grpc, part.tail);
                if end {
                    calls.end(id);
                } else {
                    live.state = State::Body(pieces);
                }
            }
            State::Cancelled => {
                if end {
                    calls.end(id);
                }
            }
        }
        Ok(())
    }

    fn pieces(
        &self,
        pieces: &mpsc::UnboundedSender<Piece>,
        data: Option<Bytes>,
        grpc: bool,
        tail: Option<Pairs>,
    ) {
        if let Some(data) = data {
            if grpc {
                self.unread.add(frame::GRPC_PREFIX);
                let _ = pieces.send(Piece::Data(frame::grpc_prefix(data.len())));
            }
            self.unread.add(data.len());
            let _ = pieces.send(Piece::Data(data));
        }
        if let Some(tail) = tail {
            match from_pairs(tail, |_, _| Ok(())) {
                Ok(trailers) => {
                    let _ = pieces.send(Piece::Trailers(trailers));
                }
                Err(err) => {
                    let _ = pieces.send(Piece::Failed(err.to_string()));
                }
            }
        }
    }
}

/// The response a call's first frame begins.
fn response(
    head: Pairs,
    reader: &Reader,
    id: u32,
    generation: u64,
    pieces: mpsc::UnboundedReceiver<Piece>,
) -> Result<Response<ProxyBody>, SessionError> {
    let mut status = None;
    let headers = from_pairs(head, |name, value| {
        if name != b":status" {
            return Err(SessionError::Protocol("a pseudo-header other than :status"));
        }
        status = StatusCode::from_bytes(&value).ok();
        Ok(())
    })?;
    let status = status.ok_or(SessionError::Protocol("a response without :status"))?;
    let body = CallBody {
        id,
        generation,
        pieces,
        calls: Arc::clone(&reader.calls),
        unread: Arc::clone(&reader.unread),
        out: reader.out.clone(),
        to_credit: 0,
        ended: false,
    };
    let mut response = Response::new(body.boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// A response's body as the session delivers it: read, it grants the peer
/// more window; dropped before its end, it cancels the call.
struct CallBody {
    id: u32,
    generation: u64,
    pieces: mpsc::UnboundedReceiver<Piece>,
    calls: Arc<Mutex<Calls>>,
    unread: Arc<Unread>,
    out: Outgoing,
    to_credit: u32,
    ended: bool,
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        match self.pieces.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Piece::Data(data))) => {
                self.unread.consumed(data.len());
                self.to_credit += data.len() as u32;
                if self.to_credit >= WINDOW / 2 {
                    let credit = std::mem::take(&mut self.to_credit);
                    self.out.control(Frame::Credit(self.id, credit));
                }
                Poll::Ready(Some(Ok(BodyFrame::data(data))))
            }
            Poll::Ready(Some(Piece::Trailers(trailers))) => {
                self.ended = true;
                Poll::Ready(Some(Ok(BodyFrame::trailers(trailers))))
            }
            Poll::Ready(Some(Piece::Failed(why))) => {
                self.ended = true;
                Poll::Ready(Some(Err(why.into())))
            }
        }
    }
}

impl Drop for CallBody {
    fn drop(&mut self) {
        while let Ok(piece) = self.pieces.try_recv() {
            if let Piece::Data(data) = piece {
                self.unread.consumed(data.len());
            }
        }
        if self.ended {
            return;
        }
        if Calls::lock(&self.calls).cancel(self.id, self.generation) {
            self.out.control(Frame::Reset(self.id, reset::CANCEL));
        }
    }
}
