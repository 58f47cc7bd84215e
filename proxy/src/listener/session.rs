//! The answering side of a session: every call that arrives as a frame is
//! handed to the handler as if it had come on a stream of its own (with
//! the session's connection id and peer identity), and its response goes
//! back as frames, within the window the caller grants.
//!
//! A session ends when the caller ends it, when its connection closes
//! (idle, shutdown: `ending`), or at the first frame that breaks its rules;
//! its calls in progress are then cancelled, as an HTTP/2 connection's
//! would be. Going away, it says `GoAway`, refuses new calls (the caller
//! sends them again on streams of their own) and ends once the calls in
//! progress have.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::body::{self, ProxyBody};
use crate::connection::Activity;
use crate::handler::Handler;
use crate::mux::frame::{self, Frame, Part};
use crate::mux::{
    count, counters, from_pairs, read_frames, ready_whole, reset, to_pairs, warn_broken, writer,
    Outgoing, SessionError, Unread, ACCEPT_HEADER, CHUNK, MAX_CALLS, WINDOW,
};
use crate::upstream::Upstream;
use tlc_core::Role;

/// What serving a session's calls needs: what the connection's own calls
/// get.
pub struct Serving<H> {
    /// Who answers each call.
    pub handler: Arc<H>,
    /// The role of the listener the connection came to.
    pub role: Role,
    /// The connection's upstream.
    pub upstream: Arc<Upstream>,
    /// The connection's calls in progress: each call of the session is
    /// one (the session itself is not).
    pub activity: Arc<Activity>,
    /// Cancelled when the connection closes: the session goes away.
    pub ending: CancellationToken,
}

/// Whether `request` opens a session this side serves.
pub fn is_session<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST
        && request.uri().path() == frame::PATH
        && request.headers().contains_key(ACCEPT_HEADER)
}

/// Answers a session's opening call and serves its calls from then on.
pub fn serve<H: Handler>(request: Request<ProxyBody>, serving: Serving<H>) -> Response<ProxyBody> {
    count(&counters().served);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let (out, stream) = writer(Some(trailers));
    let (parts, incoming) = request.into_parts();
    let session = Arc::new(Session {
        serving,
        out,
        extensions: parts.extensions,
        calls: Mutex::default(),
        quiet: Notify::new(),
        unread: Arc::default(),
    });
    tokio::spawn(Arc::clone(&session).run(incoming));
    let mut response = Response::new(stream);
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    response
        .headers_mut()
        .insert(ACCEPT_HEADER, HeaderValue::from_static("1"));
    response
}

struct Session<H> {
    serving: Serving<H>,
    out: Outgoing,
    /// The opening call's extensions (connection id, peer identity),
    /// given to every call of the session.
    extensions: http::Extensions,
    calls: Mutex<Calls>,
    /// Told whenever a call ends.
    quiet: Notify,
    unread: Arc<Unread>,
}

#[derive(Default)]
struct Calls {
    live: HashMap<u32, Live>,
    generation: u64,
    going_away: bool,
}

struct Live {
    generation: u64,
    task: AbortHandle,
    credit: Arc<Credit>,
}

/// Response bytes a call may still send before its caller grants more.
struct Credit {
    bytes: Mutex<u64>,
    granted: Notify,
}

impl Credit {
    fn grant(&self, n: u32) {
        *self.bytes.lock().unwrap_or_else(|e| e.into_inner()) += u64::from(n);
        self.granted.notify_waiters();
    }

    async fn take(&self, n: usize) {
        loop {
            let granted = self.granted.notified();
            {
                let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
                if *bytes >= n as u64 {
                    *bytes -= n as u64;
                    return;
                }
            }
            granted.await;
        }
    }
}

impl<H: Handler> Session<H> {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(self: Arc<Self>, incoming: ProxyBody) {
        let reading = read_frames(incoming, &self.unread, |frame| self.route(frame));
        tokio::pin!(reading);
        let ending = self.serving.ending.clone();
        let result = tokio::select! {
            result = &mut reading => result,
            () = ending.cancelled() => {
                self.go_away().await;
                self.out.finish();
                // The caller ends its side once it has read ours.
                reading.await
            }
        };
        if let Err(err) = &result {
            count(&counters().broken);
            warn_broken(err);
        }
        let mut calls = self.calls();
        for (_, live) in calls.live.drain() {
            live.task.abort();
        }
        drop(calls);
        self.out.finish();
    }

    /// Refuses new calls and waits until those in progress have ended.
    async fn go_away(&self) {
        self.calls().going_away = true;
        self.out.control(Frame::GoAway);
        loop {
            let quiet = self.quiet.notified();
            if self.calls().live.is_empty() {
                return;
            }
            quiet.await;
        }
    }

    fn route(self: &Arc<Self>, frame: Frame) -> Result<(), SessionError> {
        match frame {
            Frame::Call(id, part) => self.call(id, part),
            Frame::Reset(id, _) => {
                let live = self.calls().live.remove(&id);
                if let Some(live) = live {
                    live.task.abort();
                    self.out.control(Frame::Reset(id, reset::CANCEL));
                    self.quiet.notify_waiters();
                }
                Ok(())
            }
            Frame::Credit(id, bytes) => {
                if let Some(live) = self.calls().live.get(&id) {
                    live.credit.grant(bytes);
                }
                Ok(())
            }
            Frame::GoAway => Ok(()),
        }
    }

    fn call(self: &Arc<Self>, id: u32, part: Part) -> Result<(), SessionError> {
        let (Some(head), true, None) = (part.head, part.end, &part.tail) else {
            return Err(SessionError::Protocol("a request not whole in one frame"));
        };
        let request = self.request(head, part.data, part.grpc)?;
        let mut calls = self.calls();
        if calls.live.contains_key(&id) {
            return Err(SessionError::Protocol("a call id already in use"));
        }
        if calls.going_away || calls.live.len() >= MAX_CALLS {
            self.out.control(Frame::Reset(id, reset::REFUSED));
            return Ok(());
        }
        calls.generation += 1;
        let generation = calls.generation;
        let credit = Arc::new(Credit {
            bytes: Mutex::new(u64::from(WINDOW)),
            granted: Notify::new(),
        });
        let session = Arc::clone(self);
        let call_credit = Arc::clone(&credit);
        let task = tokio::spawn(async move {
            let _call = session.serving.activity.begin();
            let serving = &session.serving;
            let handled =
                Arc::clone(&serving.handler).handle(serving.role, &serving.upstream, request);
            let response = Box::pin(handled).await;
            session.answer(id, generation, response, &call_credit).await;
        });
        calls.live.insert(
            id,
            Live {
                generation,
                task: task.abort_handle(),
                credit,
            },
        );
        Ok(())
    }

    fn request(
        &self,
        head: frame::Pairs,
        data: Option<Bytes>,
        grpc: bool,
    ) -> Result<Request<ProxyBody>, SessionError> {
        let (mut path, mut authority) = (None, None);
        let headers = from_pairs(head, |name, value| {
            match name {
                b":path" => path = Some(value),
                b":authority" => authority = Some(value),
                _ => return Err(SessionError::Protocol("an unknown pseudo-header")),
            }
            Ok(())
        })?;
        let path = path.ok_or(SessionError::Protocol("a request without :path"))?;
        let uri = match authority {
            Some(authority) => [&b"http://"[..], &authority, &path].concat(),
            None => path.to_vec(),
        };
        let uri = http::Uri::try_from(uri)
            .map_err(|_| SessionError::Protocol("a request whose path is not one"))?;
        let body = match (data, grpc) {
            (Some(data), true) => body::chunks(vec![frame::grpc_prefix(data.len()), data], None),
            (Some(data), false) => body::full(data),
            (None, _) => body::empty(),
        };
        let mut request = Request::new(body);
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        *request.version_mut() = Version::HTTP_2;
        *request.headers_mut() = headers;
        *request.extensions_mut() = self.extensions.clone();
        Ok(request)
    }

    /// Sends call `id`'s response: whole in one frame where it is all
    /// there and small, else its head and then its body in chunks.
    async fn answer(
        &self,
        id: u32,
        generation: u64,
        response: Response<ProxyBody>,
        credit: &Credit,
    ) {
        let (parts, body) = response.into_parts();
        let status = (
            Bytes::from_static(b":status"),
            Bytes::copy_from_slice(parts.status.as_str().as_bytes()),
        );
        let head = Some(to_pairs(vec![status], &parts.headers));
        let mut body = match ready_whole(body, CHUNK) {
            Ok((data, trailers)) => {
                credit.take(data.len()).await;
                self.ended(id, generation);
                let (data, grpc) = match frame::single_grpc_message(&data) {
                    Some(message) => (Some(message), true),
                    None => ((!data.is_empty()).then_some(data), false),
                };
                let tail = trailers.map(|t| to_pairs(Vec::new(), &t));
                let part = Part {
                    head,
                    data,
                    grpc,
                    end: true,
                    tail,
                };
                self.out.data(Frame::Call(id, part)).await;
                return;
            }
            Err(body) => body,
        };
        let part = Part {
            head,
            ..Part::default()
        };
        if !self.out.data(Frame::Call(id, part)).await {
            return;
        }
        loop {
            let end = match body.frame().await {
                None => Part {
                    end: true,
                    ..Part::default()
                },
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(mut data) => {
                        while !data.is_empty() {
                            let piece = data.split_to(data.len().min(CHUNK));
                            credit.take(piece.len()).await;
                            let part = Part {
                                data: Some(piece),
                                ..Part::default()
                            };
                            if !self.out.data(Frame::Call(id, part)).await {
                                return;
                            }
                        }
                        continue;
                    }
                    Err(frame) => Part {
                        end: true,
                        tail: frame.into_trailers().ok().map(|t| to_pairs(Vec::new(), &t)),
                        ..Part::default()
                    },
                },
                Some(Err(err)) => {
                    debug!(error = %err, "a response body failed; resetting the call");
                    self.ended(id, generation);
                    self.out.control(Frame::Reset(id, reset::INTERNAL));
                    return;
                }
            };
            self.ended(id, generation);
            self.out.data(Frame::Call(id, end)).await;
            return;
        }
    }

    /// Call `id` is done here: its id may come again in the caller's next
    /// call once the caller has read this call's last frame.
    fn ended(&self, id: u32, generation: u64) {
        let mut calls = self.calls();
        if calls.live.get(&id).map(|l| l.generation) == Some(generation) {
            calls.live.remove(&id);
        }
        drop(calls);
        self.quiet.notify_waiters();
    }
}

/// The answer to an opening call this side will not serve: a plaintext
/// caller where peers must use TLS.
pub fn refused() -> Response<ProxyBody> {
    let mut response = crate::grpc_status::response(
        crate::grpc_status::PERMISSION_DENIED,
        "tlcd: a session needs an authenticated peer",
    );
    *response.status_mut() = StatusCode::OK;
    response
}
