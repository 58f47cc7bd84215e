//! A stand-in for tlcd's admin API: answers each request from a handler and
//! records what it received, so tests can check both what `tlcctl` sent and
//! what it made of the answer. [`tlcctl`] runs the command against it. The
//! answers it makes up are `tlc_admin_api`'s types, as tlcd's are.

#![allow(dead_code)]

pub mod tlcctl;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::Value;
use tlc_admin_api::status::{
    Contexts, DirectionTotals, Listener, Reloads, Role, TableSize, Totals, Training,
};
use tlc_admin_api::{CodecView, PolicyChanged, PolicyView, Status, TensorRow};

use tlcctl::{run, Run};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path with the query, as sent.
    pub path: String,
    /// The body, as sent (empty when there is none).
    pub body: String,
    /// The content-type header, if any.
    pub content_type: Option<String>,
    /// The authorization header, if any.
    pub authorization: Option<String>,
}

impl Request {
    /// The path without the query.
    pub fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }

    /// The body parsed as JSON (panics if it is not: tlcctl must send JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body {:?}: {e}", self.body))
    }
}

/// What the server answers.
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body: body.to_string(),
        }
    }

    pub fn raw(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.to_string(),
        }
    }
}

/// A running fake admin API on 127.0.0.1.
pub struct FakeAdmin {
    addr: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeAdmin {
    /// Serves `handler(request, n)`, n counting the requests to the same
    /// method and path from 0, until the test process ends.
    pub fn start<H>(handler: H) -> FakeAdmin
    where
        H: Fn(&Request, usize) -> Reply + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else {
                    continue;
                };
                let n = {
                    let mut all = recorded.lock().expect("lock");
                    let n = all
                        .iter()
                        .filter(|r: &&Request| r.method == request.method && r.path == request.path)
                        .count();
                    all.push(request.clone());
                    n
                };
                let reply = handler(&request, n);
                write_reply(stream, &reply);
            }
        });
        FakeAdmin { addr, requests }
    }

    /// Answers `method path` (query ignored) with `status` and `body`, and
    /// anything else with 404 and an `error`.
    pub fn route(method: &'static str, path: &'static str, status: u16, body: Value) -> FakeAdmin {
        FakeAdmin::start(move |request, _| {
            if request.method == method && request.path_only() == path {
                Reply::json(status, body.clone())
            } else {
                Reply::json(404, serde_json::json!({"error": "no such endpoint"}))
            }
        })
    }

    /// Answers `method path` with 200 and `body`.
    pub fn answering(method: &'static str, path: &'static str, body: Value) -> FakeAdmin {
        FakeAdmin::route(method, path, 200, body)
    }

    /// Refuses `method path` with 400 and `{"error": message}`, as tlcd
    /// refuses a change.
    pub fn refusing(method: &'static str, path: &'static str, message: &str) -> FakeAdmin {
        FakeAdmin::route(method, path, 400, serde_json::json!({ "error": message }))
    }

    /// Answers like `handler`, but only requests that carry
    /// `Authorization: Bearer` and the token `token` holds at the time (a
    /// test changes it to rotate); any other gets tlcd's `401`.
    pub fn with_token<H>(token: Arc<Mutex<String>>, handler: H) -> FakeAdmin
    where
        H: Fn(&Request, usize) -> Reply + Send + 'static,
    {
        FakeAdmin::start(move |request, n| {
            let expected = format!("Bearer {}", token.lock().expect("lock"));
            if request.authorization.as_deref() == Some(expected.as_str()) {
                handler(request, n)
            } else {
                Reply::json(
                    401,
                    serde_json::json!({"error": "this admin API needs a token: send 'Authorization: Bearer TOKEN'"}),
                )
            }
        })
    }

    /// A policy endpoint that reports `policy.push.sparsity` changed.
    pub fn policy() -> FakeAdmin {
        let changed = PolicyChanged {
            changed: vec!["policy.push.sparsity".into()],
            policy: PolicyView {
                push: three_lc(1.75),
                ..policy()
            },
        };
        FakeAdmin::answering("POST", "/v1/policy", json(&changed))
    }

    /// Runs `tlcctl ARGS --admin ADDR` against this server.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--admin", self.addr()]);
        run(&all)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }

    /// How many requests so far were to `path` (with its query).
    pub fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|r| r.path == path).count()
    }

    /// The only request so far.
    pub fn only_request(&self) -> Request {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        requests[0].clone()
    }

    /// The only request so far, which must be `method path`.
    pub fn only_request_to(&self, method: &str, path: &str) -> Request {
        let request = self.only_request();
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            (method, path)
        );
        request
    }
}

/// An address where nothing listens.
pub fn dead_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr").to_string();
    drop(listener);
    addr
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut length = 0usize;
    let mut content_type = None;
    let mut authorization = None;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
            if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value.trim().to_string());
            }
            if name.eq_ignore_ascii_case("authorization") {
                authorization = Some(value.trim().to_string());
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        body: String::from_utf8(body).ok()?,
        content_type,
        authorization,
    })
}

fn write_reply(mut stream: TcpStream, reply: &Reply) {
    let head = format!(
        "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.status,
        reply.body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(reply.body.as_bytes());
    let _ = stream.flush();
}

/// `value` as tlcd would send it.
fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("an admin API type is JSON")
}

fn three_lc(sparsity: f64) -> CodecView {
    CodecView {
        codec: "3lc".into(),
        sparsity: Some(sparsity),
        k: None,
    }
}

/// The policy of ADMIN-API.md's status.
fn policy() -> PolicyView {
    PolicyView {
        push: three_lc(1.0),
        pull: three_lc(1.0),
        min_bytes: 65536,
        overrides: 0,
    }
}

/// The status body of ADMIN-API.md, with `push_raw` and `push_wire` as the
/// push totals, 3 decode failures and 1 fallback.
pub fn status(push_raw: u64, push_wire: u64) -> Value {
    let table = |contexts, memory_bytes| TableSize {
        contexts,
        memory_bytes,
    };
    json(&Status {
        version: "0.1.0".into(),
        pid: 4242,
        uptime_seconds: 81.5,
        ready: true,
        config_file: Some("/etc/tlc/tlcd.toml".into()),
        listeners: vec![Listener {
            listen: "127.0.0.1:17001".into(),
            role: Role::Outbound,
            target: "original-destination".into(),
        }],
        policy: policy(),
        totals: Totals {
            push: DirectionTotals {
                tensors: 120,
                raw_bytes: push_raw,
                wire_bytes: push_wire,
                ratio: 86.98,
            },
            pull: DirectionTotals {
                tensors: 120,
                raw_bytes: 251658240,
                wire_bytes: 4300312,
                ratio: 58.52,
            },
            restored: 240,
            decode_failures: 3,
            fallbacks: 1,
            fallbacks_served: 0,
            passed: [("small".to_string(), 480)].into(),
            rows: Default::default(),
            hop: Default::default(),
            sessions: Default::default(),
        },
        training: Training {
            global_step: Some(99),
            seconds_since_advanced: Some(0.4),
            advanced_unix_time: Some(1790000584.2),
            resets: 0,
            resets_failed: 0,
            resets_warned: 0,
            rewinds: 0,
            last_reset: None,
            last_rewind: None,
            on_model_reset: "fail".into(),
            stalls_failed: 0,
        },
        contexts: Contexts {
            push: table(4, 4771840),
            pull: table(0, 0),
            replicas: table(0, 0),
            rows: table(0, 0),
        },
        log_filter: "info".into(),
        log_format: "human".into(),
        reloads: Reloads {
            ok: 1,
            ..Reloads::default()
        },
        links: Default::default(),
    })
}

/// One `/v1/tensors` row.
pub fn tensor(name: &str, raw: u64, wire: u64, ratio: f64) -> Value {
    json(&TensorRow {
        direction: "push".into(),
        side: "holder".into(),
        tensor: name.into(),
        class: Some("dense_gradient".into()),
        reason: Some("feeds ApplyMomentum apply".into()),
        treatment: Some("error_feedback".into()),
        peer: Some("/job:worker/replica:0/task:1".into()),
        codec: three_lc(1.0),
        elements: 524288,
        frames: 120,
        raw_bytes: raw,
        wire_bytes: wire,
        ratio,
        last_scale: Some(0.0123),
        error_norm: Some(0.731),
        peak_norm: Some(1.25),
        regime: Some("calm".into()),
        critical_pushes: Some(40),
        agreement: Some(0.12),
        replica_version: None,
        idle_seconds: 0.4,
        memory_bytes: 2097152,
        link: Some("compress".into()),
        link_rate: Some(1.25e6),
        break_even_rate: Some(0.9e9),
    })
}
