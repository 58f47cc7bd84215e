//! Requests to tlcd admin APIs, and what a failed one says.
//!
//! Every failure becomes one line of text that a person can act on: which
//! address could not be reached and why, the daemon's own `error` field
//! verbatim, or which target answered something that is not JSON. Nothing
//! a server sends can make `tlcctl` panic.

use std::io;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use tlc_admin_api::ErrorBody;
use ureq::http::StatusCode;

use super::target::Target;
use super::token::{self, Tokens};

/// The most `tlcctl` reads of one answer; far above any real one (a
/// sidecar with ten thousand tensor contexts answers a few MiB).
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;

const JSON: &str = "application/json";

/// How much of a non-JSON answer an error message quotes.
const SNIPPET_CHARS: usize = 120;

/// The HTTP methods the admin API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Reads.
    Get,
    /// `/v1/log-level`.
    Put,
    /// `/v1/policy`, `/v1/reload`.
    Post,
    /// `/v1/config`.
    Patch,
}

/// What one target answered: its JSON, or a one-line reason it did not.
pub type Answer = Result<Value, String>;

/// A target and what it answered.
#[derive(Debug)]
pub struct Outcome {
    /// Who was asked.
    pub target: Target,
    /// What came back.
    pub answer: Answer,
}

/// Talks HTTP/1.1 to admin APIs; one per command run.
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
    timeout: Duration,
    tokens: Tokens,
}

impl Client {
    /// A client whose every request, connecting included, gives up after
    /// `timeout`, and that sends the admin token `tokens` gives.
    pub fn new(timeout: Duration, tokens: Tokens) -> Client {
        let config = ureq::Agent::config_builder()
            // 4xx/5xx carry the daemon's `error` field, which is the message
            // to print; ureq's own error would lose it.
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            // The admin API sits on the pod's loopback: an HTTP_PROXY set
            // for the internet must not capture it.
            .proxy(None)
            .max_redirects(0)
            .user_agent(concat!("tlcctl/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: config.new_agent(),
            timeout,
            tokens,
        }
    }

    /// Sends one request (`path` may carry a query) and returns the JSON
    /// answer of a 2xx, or why there is none.
    pub fn call(
        &self,
        target: &Target,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        let url = target.url(path);
        let choice = self.tokens.choose(target.is_loopback(), target.port())?;
        let authorization = choice.token.as_ref().map(|t| format!("Bearer {t}"));
        // Compact JSON, one line: what an operator would type with curl,
        // and what the daemon's logs show best. A change without a body
        // (reload) is still declared JSON: tlcd refuses any other type.
        let json = body.map(Value::to_string).unwrap_or_default();
        let sent = match method {
            Method::Get => authorize(self.agent.get(&url), &authorization).call(),
            Method::Put => authorize(self.agent.put(&url), &authorization)
                .content_type(JSON)
                .send(json),
            Method::Post => authorize(self.agent.post(&url), &authorization)
                .content_type(JSON)
                .send(json),
            Method::Patch => authorize(self.agent.patch(&url), &authorization)
                .content_type(JSON)
                .send(json),
        };
        let mut response = sent.map_err(|err| self.transport_error(target, err))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED {
            return Err(token::refused(target.label(), &choice.source));
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|err| self.transport_error(target, err))?;
        interpret(target, status, &text)
    }

    /// Runs `f` against every target at once (a job's sidecars answer in
    /// the time of the slowest, not the sum) and returns the results in the
    /// targets' order.
    pub fn each<T, F>(&self, targets: &[Target], f: F) -> Vec<T>
    where
        T: Send,
        F: Fn(&Client, &Target) -> T + Sync,
    {
        if let [only] = targets {
            return vec![f(self, only)];
        }
        thread::scope(|scope| {
            let handles: Vec<_> = targets
                .iter()
                .map(|target| {
                    let f = &f;
                    scope.spawn(move || f(self, target))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }

    /// Sends the same request to every target.
    pub fn call_all(
        &self,
        targets: &[Target],
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Vec<Outcome> {
        self.each(targets, |client, target| Outcome {
            target: target.clone(),
            answer: client.call(target, method, path, body),
        })
    }

    fn transport_error(&self, target: &Target, err: ureq::Error) -> String {
        match err {
            ureq::Error::Timeout(_) => format!(
                "tlcd admin at {target} did not answer within {}",
                seconds(self.timeout)
            ),
            ureq::Error::Io(err) => {
                format!("cannot reach tlcd admin at {target}: {}", io_reason(&err))
            }
            ureq::Error::HostNotFound => {
                format!("cannot reach tlcd admin at {target}: host not found")
            }
            ureq::Error::ConnectionFailed => {
                format!("cannot reach tlcd admin at {target}: connection failed")
            }
            ureq::Error::Protocol(err) => {
                format!("tlcd admin at {target} did not answer in HTTP/1.1: {err}")
            }
            ureq::Error::BodyExceedsLimit(_) => format!(
                "tlcd admin at {target} answered more than {} MiB",
                MAX_BODY_BYTES >> 20
            ),
            err => format!("request to tlcd admin at {target} failed: {err}"),
        }
    }
}

/// `builder` with `Authorization: Bearer TOKEN` when there is a token.
fn authorize<B>(
    builder: ureq::RequestBuilder<B>,
    authorization: &Option<String>,
) -> ureq::RequestBuilder<B> {
    match authorization {
        Some(value) => builder.header("authorization", value),
        None => builder,
    }
}

/// Turns a complete answer into JSON or an error line.
fn interpret(target: &Target, status: StatusCode, text: &str) -> Answer {
    if status.is_success() {
        return serde_json::from_str::<Value>(text).map_err(|_| {
            format!(
                "tlcd admin at {target} answered {} with something that is not JSON: {}",
                status_text(status),
                snippet(text)
            )
        });
    }
    // The daemon's `error` field is the whole message: it already names the
    // key and the rule, and operators grep for it as written.
    if let Ok(refusal) = serde_json::from_str::<ErrorBody>(text) {
        return Err(refusal.error.replace('\n', " "));
    }
    Err(format!(
        "tlcd admin at {target} answered {} without an error message: {}",
        status_text(status),
        snippet(text)
    ))
}

/// `404 Not Found`.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The start of a body, on one line.
fn snippet(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        return "(empty body)".to_string();
    }
    let mut cut: String = flat.chars().take(SNIPPET_CHARS).collect();
    if cut.len() < flat.len() {
        cut.push_str("...");
    }
    format!("{cut:?}")
}

/// Why a socket failed, in the words of `connection refused`; the OS's
/// own text where std has no short name for it.
fn io_reason(err: &io::Error) -> String {
    use io::ErrorKind::*;
    match err.kind() {
        kind @ (ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected
        | AddrNotAvailable | HostUnreachable | NetworkUnreachable | TimedOut
        | BrokenPipe | UnexpectedEof) => kind.to_string(),
        _ => err.to_string(),
    }
}

/// `5s`, `0.5s`.
fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        super::super::target::parse("h:1").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn daemon_error_is_verbatim() {
        let answer = interpret(
            &target(),
            StatusCode::BAD_REQUEST,
            r#"{"error": "sparsity 2.5 is out of range [1.0, 2.0)"}"#,
        );
        assert_eq!(
            answer,
            Err("sparsity 2.5 is out of range [1.0, 2.0)".to_string())
        );
    }

    #[test]
    fn non_json_names_the_target() {
        let answer = interpret(&target(), StatusCode::OK, "<html>hello</html>");
        let message = answer.err().unwrap_or_default();
        assert!(
            message.contains("h:1") && message.contains("not JSON"),
            "{message}"
        );
        let answer = interpret(&target(), StatusCode::BAD_GATEWAY, "");
        let message = answer.err().unwrap_or_default();
        assert!(
            message.contains("502 Bad Gateway") && message.contains("empty"),
            "{message}"
        );
    }

    #[test]
    fn snippet_is_short() {
        let long = "x".repeat(1000);
        assert_eq!(snippet(&long).len(), SNIPPET_CHARS + 5);
    }
}
