//! The three lines the two tlcds exchange, as pure parsers and writers (no
//! sockets here, so the fuzz target `handover_manifest` can feed them).
//!
//! ```text
//! successor   → {"hello":"tlcd-handover","version":1,"pid":4242,"tlcd":"0.1.0"}\n
//! predecessor → {"version":1,"listeners":[{"purpose":"route","addr":"127.0.0.1:4322"}]}\n
//!               (one sendmsg: this line as data, the listeners' descriptors,
//!               in the same order, as SCM_RIGHTS)
//!            or {"version":1,"refused":"why"}\n   (no descriptors)
//! successor   → {"ready":true}\n  or  {"ready":false,"error":"why"}\n
//! predecessor:  after "ready", removes its socket file and closes
//! ```
//!
//! Each line is one JSON object ending in `\n`, at most [`MAX_LINE`]
//! bytes. Fields a reader does not know are ignored, so a later tlcd may
//! add some without a new version; anything it must understand needs a
//! new [`VERSION`].

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::HandoverError;

/// The protocol version this tlcd speaks.
pub const VERSION: u32 = 1;

/// The longest line either side accepts, newline included.
pub const MAX_LINE: usize = 64 * 1024;

/// The most listeners (and descriptors) one hand-over carries.
pub const MAX_LISTENERS: usize = 64;

/// The word that opens a successor's hello, so that a stray client of the
/// socket is told apart from a tlcd of another version.
const HELLO_WORD: &str = "tlcd-handover";

/// The longest tlcd version string a hello may carry.
const MAX_TLCD_VERSION: usize = 64;

/// The longest reason a refusal or a failed ready is kept with, in bytes:
/// it ends up in a log line.
pub const MAX_REASON: usize = 1024;

/// What a handed-over listener serves, so the successor knows which of its
/// own listeners it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    /// A `[[routes]]` listener (TensorFlow's or a peer sidecar's traffic).
    Route,
    /// The admin API.
    Admin,
    /// The Prometheus metrics endpoint.
    Metrics,
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Purpose::Route => "route",
            Purpose::Admin => "admin",
            Purpose::Metrics => "metrics",
        })
    }
}

/// The successor's first line: who asks for the listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The successor's process id (for the predecessor's log).
    pub pid: u32,
    /// The successor's tlcd version (for the predecessor's log).
    pub tlcd: String,
}

#[derive(Deserialize, Serialize)]
struct HelloLine {
    hello: Option<String>,
    version: Option<u64>,
    pid: Option<u32>,
    tlcd: Option<String>,
}

impl Hello {
    /// The hello of this process.
    pub fn current() -> Hello {
        Hello {
            pid: std::process::id(),
            tlcd: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// Reads one hello line (the trailing newline is optional).
    pub fn parse(line: &[u8]) -> Result<Hello, HandoverError> {
        let bad = |reason: String| HandoverError::Malformed {
            what: "hello",
            reason,
        };
        let raw: HelloLine = parse_object(line, "hello")?;
        if raw.hello.as_deref() != Some(HELLO_WORD) {
            return Err(bad(format!(
                "it does not open with \"hello\":\"{HELLO_WORD}\""
            )));
        }
        check_version(raw.version, "hello")?;
        let pid = raw.pid.ok_or_else(|| bad("no \"pid\"".into()))?;
        let tlcd = raw.tlcd.ok_or_else(|| bad("no \"tlcd\" version".into()))?;
        if tlcd.len() > MAX_TLCD_VERSION {
            return Err(bad(format!(
                "its \"tlcd\" version is longer than {MAX_TLCD_VERSION} bytes"
            )));
        }
        Ok(Hello { pid, tlcd })
    }

    /// The line to send, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        to_line(&HelloLine {
            hello: Some(HELLO_WORD.to_string()),
            version: Some(VERSION.into()),
            pid: Some(self.pid),
            tlcd: Some(self.tlcd.clone()),
        })
    }
}

/// One listener in a [`Manifest`]: what it serves and where it is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// What it serves.
    pub purpose: Purpose,
    /// The address it is bound to, as `local_addr()` gives it.
    pub addr: SocketAddr,
}

/// The predecessor's answer: the listeners whose descriptors come with it,
/// in the same order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// The listeners, at most [`MAX_LISTENERS`], no address twice.
    pub listeners: Vec<ManifestEntry>,
}

#[derive(Deserialize, Serialize)]
struct ManifestLine {
    version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    listeners: Option<Vec<ManifestEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

impl Manifest {
    /// Reads one manifest line (the trailing newline is optional). A
    /// refusal line is [`HandoverError::Refused`].
    pub fn parse(line: &[u8]) -> Result<Manifest, HandoverError> {
        let bad = |reason: String| HandoverError::Malformed {
            what: "manifest",
            reason,
        };
        let raw: ManifestLine = parse_object(line, "manifest")?;
        // A refusal is read whatever its version: its reason is the news.
        if let Some(why) = raw.refused {
            return Err(HandoverError::Refused(clip(why)));
        }
        check_version(raw.version, "manifest")?;
        let listeners = raw
            .listeners
            .ok_or_else(|| bad("no \"listeners\"".into()))?;
        if listeners.len() > MAX_LISTENERS {
            return Err(bad(format!(
                "{} listeners, at most {MAX_LISTENERS} are handed over",
                listeners.len()
            )));
        }
        let mut seen = HashSet::new();
        if let Some(twice) = listeners.iter().find(|entry| !seen.insert(entry.addr)) {
            return Err(bad(format!("{} is listed twice", twice.addr)));
        }
        Ok(Manifest { listeners })
    }

    /// The line to send, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        to_line(&ManifestLine {
            version: Some(VERSION.into()),
            listeners: Some(self.listeners.clone()),
            refused: None,
        })
    }

    /// The line that refuses a successor, newline included.
    pub fn refusal_line(why: &str) -> Vec<u8> {
        to_line(&ManifestLine {
            version: Some(VERSION.into()),
            listeners: None,
            refused: Some(why.to_string()),
        })
    }
}

/// The successor's last line: whether it now accepts on every listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// It accepts on all of them; the predecessor may stop.
    Serving,
    /// It could not; the predecessor keeps serving. The reason, clipped.
    Failed(String),
}

#[derive(Deserialize, Serialize)]
struct ReadyLine {
    ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Ready {
    /// Reads one ready line (the trailing newline is optional).
    pub fn parse(line: &[u8]) -> Result<Ready, HandoverError> {
        let raw: ReadyLine = parse_object(line, "ready line")?;
        match raw.ready {
            Some(true) => Ok(Ready::Serving),
            Some(false) => Ok(Ready::Failed(clip(
                raw.error.unwrap_or_else(|| "no reason given".into()),
            ))),
            None => Err(HandoverError::Malformed {
                what: "ready line",
                reason: "no \"ready\"".into(),
            }),
        }
    }

    /// The line to send, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        to_line(&match self {
            Ready::Serving => ReadyLine {
                ready: Some(true),
                error: None,
            },
            Ready::Failed(why) => ReadyLine {
                ready: Some(false),
                error: Some(why.clone()),
            },
        })
    }
}

/// Parses one JSON object, after at most one trailing newline.
fn parse_object<'de, T: Deserialize<'de>>(
    line: &'de [u8],
    what: &'static str,
) -> Result<T, HandoverError> {
    if line.len() > MAX_LINE {
        return Err(HandoverError::TooLong {
            what,
            limit: MAX_LINE,
        });
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    serde_json::from_slice(line).map_err(|err| HandoverError::Malformed {
        what,
        reason: format!("not a JSON object of the expected shape: {err}"),
    })
}

fn check_version(version: Option<u64>, what: &'static str) -> Result<(), HandoverError> {
    match version {
        Some(v) if v == u64::from(VERSION) => Ok(()),
        Some(v) => Err(HandoverError::Version { what, version: v }),
        None => Err(HandoverError::Malformed {
            what,
            reason: "no \"version\"".into(),
        }),
    }
}

fn to_line<T: Serialize>(value: &T) -> Vec<u8> {
    // These types hold only strings, numbers, booleans and addresses,
    // which serde_json always writes; an empty object is never sent.
    let mut line = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// Keeps at most [`MAX_REASON`] bytes of a peer's reason, cut on a
/// character boundary and marked with `…`; a clipped reason clips to
/// itself.
fn clip(mut why: String) -> String {
    if why.len() > MAX_REASON {
        let mut end = MAX_REASON - '…'.len_utf8();
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        why.truncate(end);
        why.push('…');
    }
    why
}
