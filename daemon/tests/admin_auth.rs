//! A running `tlcd`'s admin API turns away what a hostile client could
//! do to it: a change without the token, or with a wrong or rotated-out
//! one (401); a foreign `Host` or a web page's `Origin` (403); a body that
//! is not declared JSON (415); a body trickled in forever (408); a number
//! beyond its bound (400). Each time the test checks that nothing changed.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::process::{free_addr, spawn_tlcd, KillOnDrop};
use tempfile::TempDir;

const TOKEN_V1: &str = "first-secret-token-0123456789";
const TOKEN_V2: &str = "second-secret-token-0123456789";

/// A `tlcd` with its admin API on a free port, killed when dropped.
struct Tlcd {
    process: KillOnDrop,
    admin: SocketAddr,
    /// Its `XDG_RUNTIME_DIR`, where it writes its own token.
    runtime: TempDir,
}

/// The command line of a tlcd with one route nobody uses, its admin API
/// on `admin`, `XDG_RUNTIME_DIR` at `runtime`, and `args` / `env` added.
fn tlcd_command(admin: SocketAddr, runtime: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let (inbound, upstream) = (free_addr(), free_addr());
    let mut command = Command::new(env!("CARGO_BIN_EXE_tlcd"));
    command
        .args(["--route", &format!("{inbound}={upstream},inbound")])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--metrics-listen", "off"])
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("TLC_ADMIN_TOKEN_FILE")
        .env("RUST_LOG", "info")
        .env(support::COMPRESSING_ENV.0, support::COMPRESSING_ENV.1)
        .envs(env.iter().copied());
    command
}

impl Tlcd {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Tlcd {
        let runtime = tempfile::tempdir().expect("temp dir");
        let admin = free_addr();
        let process = spawn_tlcd(&mut tlcd_command(admin, runtime.path(), args, env));
        let tlcd = Tlcd {
            process,
            admin,
            runtime,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Answering probes: bound, token in place (it is read before serving).
        while get_probe(admin).is_none() {
            assert!(
                Instant::now() < deadline,
                "tlcd's admin API did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        tlcd
    }

    /// Where tlcd writes its own token.
    fn own_token_file(&self) -> PathBuf {
        self.runtime
            .path()
            .join("tlcd")
            .join(format!("admin-{}.token", self.admin.port()))
    }

    fn own_token(&self) -> String {
        std::fs::read_to_string(self.own_token_file())
            .expect("tlcd's own token file")
            .trim()
            .to_string()
    }

    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        send(self.admin, method, path, headers, body)
    }

    /// `GET /v1/status` with `token`; must succeed.
    fn status(&self, token: &str) -> Value {
        let answer = self.send("GET", "/v1/status", &[auth(token).as_ref_pair()], "");
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()
    }

    fn push_sparsity(&self, token: &str) -> f64 {
        self.status(token)["policy"]["push"]["sparsity"]
            .as_f64()
            .expect("a 3LC sparsity")
    }
}

/// An `Authorization` header.
struct Auth(String);

impl Auth {
    fn as_ref_pair(&self) -> (&str, &str) {
        ("authorization", self.0.as_str())
    }
}

fn auth(token: &str) -> Auth {
    Auth(format!("Bearer {token}"))
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// What came back.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// One request on its own connection; `Host` is the admin address unless
/// `headers` names one.
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect to the admin API");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).expect("send");
    read_answer(&mut stream)
}

fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read the answer");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// `GET /healthz` without a token, `None` until the API answers.
fn get_probe(addr: SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    raw.split_whitespace().nth(1)?.parse().ok()
}

const CHANGE: &str = r#"{"direction": "push", "sparsity": 1.75}"#;

#[test]
fn without_the_right_token_nothing_changes() {
    let tlcd = Tlcd::start(&[], &[]);
    // tlcd made its token and put it where only its user can read it.
    let file = tlcd.own_token_file();
    let token = tlcd.own_token();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().expect("dir")), 0o700);

    let none = tlcd.send("POST", "/v1/policy", &[JSON], CHANGE);
    assert_eq!(none.status, 401, "{none:?}");
    assert!(
        none.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")),
        "{none:?}"
    );
    assert!(
        none.error().contains("needs a token")
            && none.error().contains(&file.display().to_string()),
        "{}",
        none.error()
    );
    let wrong = auth("0123456789abcdef0123456789abcdef");
    let refused = tlcd.send("POST", "/v1/policy", &[JSON, wrong.as_ref_pair()], CHANGE);
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(
        refused.error().contains("not the one in force"),
        "{}",
        refused.error()
    );
    // A prefix of the token is not the token.
    let prefix = auth(&token[..32]);
    assert_eq!(
        tlcd.send("POST", "/v1/policy", &[JSON, prefix.as_ref_pair()], CHANGE)
            .status,
        401
    );
    // Reads need it too; the probes do not.
    assert_eq!(tlcd.send("GET", "/v1/status", &[], "").status, 401);
    assert_eq!(
        tlcd.send("GET", "/v1/config", &[wrong.as_ref_pair()], "")
            .status,
        401
    );
    assert_eq!(tlcd.send("GET", "/healthz", &[], "").status, 200);
    assert_ne!(tlcd.send("GET", "/readyz", &[], "").status, 401);
    assert_eq!(tlcd.push_sparsity(&token), 1.0);

    let right = auth(&token);
    let ok = tlcd.send("POST", "/v1/policy", &[JSON, right.as_ref_pair()], CHANGE);
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(tlcd.push_sparsity(&token), 1.75);

    // At shutdown tlcd removes the file it wrote.
    // SAFETY: kill(2) with a pid this test started and still owns.
    let rc = unsafe { libc::kill(tlcd.process.0.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while file.exists() {
        assert!(
            Instant::now() < deadline,
            "{} is still there",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A directory laid out as Kubernetes mounts a Secret: `token` ->
/// `..data/token`, `..data` -> a timestamped directory, replaced whole.
struct Secret {
    dir: TempDir,
    generation: u32,
}

impl Secret {
    fn new(token: &str) -> Secret {
        let dir = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink("..data/token", dir.path().join("token")).expect("symlink");
        let mut secret = Secret { dir, generation: 0 };
        secret.rotate(token);
        secret
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    /// Writes a new generation and swaps `..data` to it in one rename.
    fn rotate(&mut self, token: &str) {
        self.generation += 1;
        let name = format!("..2026_11_24_{:02}", self.generation);
        let generation = self.dir.path().join(&name);
        std::fs::create_dir(&generation).expect("mkdir");
        std::fs::write(generation.join("token"), format!("{token}\n")).expect("write");
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).expect("symlink");
        std::fs::rename(&tmp, self.dir.path().join("..data")).expect("swap ..data");
    }
}

#[test]
fn a_rotated_token_file_takes_over_without_a_restart() {
    let mut secret = Secret::new(TOKEN_V1);
    let path = secret.path().to_string_lossy().to_string();
    let tlcd = Tlcd::start(&[], &[("TLC_ADMIN__TOKEN_FILE", &path)]);
    let pid = tlcd.process.0.id();
    assert_eq!(tlcd.push_sparsity(TOKEN_V1), 1.0);
    // With a configured file tlcd writes no token of its own.
    assert!(!tlcd.own_token_file().exists());

    secret.rotate(TOKEN_V2);
    let deadline = Instant::now() + Duration::from_secs(5);
    let v2 = auth(TOKEN_V2);
    while tlcd
        .send("GET", "/v1/status", &[v2.as_ref_pair()], "")
        .status
        != 200
    {
        assert!(Instant::now() < deadline, "the rotated token was not taken");
        std::thread::sleep(Duration::from_millis(100));
    }
    let v1 = auth(TOKEN_V1);
    let old = tlcd.send("POST", "/v1/policy", &[JSON, v1.as_ref_pair()], CHANGE);
    assert_eq!(old.status, 401, "{old:?}");
    assert!(old.error().contains(&path), "{}", old.error());
    assert_eq!(tlcd.push_sparsity(TOKEN_V2), 1.0);
    let new = tlcd.send("POST", "/v1/policy", &[JSON, v2.as_ref_pair()], CHANGE);
    assert_eq!(new.status, 200, "{new:?}");
    assert_eq!(tlcd.push_sparsity(TOKEN_V2), 1.75);
    assert_eq!(tlcd.process.0.id(), pid);
}

#[test]
fn foreign_hosts_web_pages_and_other_content_types_are_refused() {
    let secret = Secret::new(TOKEN_V1);
    let path = secret.path().to_string_lossy().to_string();
    let tlcd = Tlcd::start(
        &["--admin-token-file", &path],
        &[("TLC_ADMIN__ALLOWED_HOSTS", "tlc-admin.example,10.9.8.7")],
    );
    let token = auth(TOKEN_V1);
    let port = tlcd.admin.port();
    let evil_host = format!("evil.example:{port}");

    let answer = tlcd.send(
        "POST",
        "/v1/policy",
        &[JSON, token.as_ref_pair(), ("host", &evil_host)],
        CHANGE,
    );
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.error().contains("admin.allowed_hosts"),
        "{}",
        answer.error()
    );
    let answer = tlcd.send(
        "GET",
        "/v1/status",
        &[token.as_ref_pair(), ("host", &evil_host)],
        "",
    );
    assert_eq!(answer.status, 403, "{answer:?}");

    let origin = ("origin", "http://evil.example");
    let answer = tlcd.send(
        "POST",
        "/v1/policy",
        &[JSON, token.as_ref_pair(), origin],
        CHANGE,
    );
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(answer.error().contains("Origin"), "{}", answer.error());

    let plain = ("content-type", "text/plain");
    let answer = tlcd.send("POST", "/v1/policy", &[plain, token.as_ref_pair()], CHANGE);
    assert_eq!(answer.status, 415, "{answer:?}");
    assert!(
        answer.error().contains("application/json"),
        "{}",
        answer.error()
    );
    let form = ("content-type", "application/x-www-form-urlencoded");
    let answer = tlcd.send(
        "PUT",
        "/v1/log-level",
        &[form, token.as_ref_pair()],
        r#"{"filter":"trace"}"#,
    );
    assert_eq!(answer.status, 415, "{answer:?}");
    let answer = tlcd.send("POST", "/v1/reload", &[token.as_ref_pair()], "");
    assert_eq!(answer.status, 415, "{answer:?}");

    assert_eq!(tlcd.push_sparsity(TOKEN_V1), 1.0);
    assert_eq!(tlcd.status(TOKEN_V1)["log_filter"], "info");
    assert_eq!(tlcd.status(TOKEN_V1)["reloads"]["ok"], 0);

    // The names the operator allowed, and loopback names on any port.
    for host in [
        format!("tlc-admin.example:{port}"),
        format!("10.9.8.7:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
        format!("[::1]:{port}"),
    ] {
        let answer = tlcd.send(
            "GET",
            "/v1/status",
            &[token.as_ref_pair(), ("host", &host)],
            "",
        );
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
    }
    let answer = tlcd.send("POST", "/v1/policy", &[JSON, token.as_ref_pair()], CHANGE);
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[test]
fn a_trickled_body_times_out_and_changes_nothing() {
    let tlcd = Tlcd::start(&[], &[]);
    let token = tlcd.own_token();
    let mut stream = TcpStream::connect(tlcd.admin).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let head = format!(
        "POST /v1/policy HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        tlcd.admin,
        CHANGE.len()
    );
    stream.write_all(head.as_bytes()).expect("send the head");
    let started = Instant::now();
    // A byte a second: the whole body would take 40 s.
    let trickle = stream.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        let mut trickle = trickle;
        for byte in CHANGE.bytes() {
            if trickle.write_all(&[byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let answer = read_answer(&mut stream);
    let waited = started.elapsed();
    assert_eq!(answer.status, 408, "{answer:?}");
    assert!(
        answer.error().contains("did not arrive within 5s"),
        "{}",
        answer.error()
    );
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "answered after {waited:?}"
    );
    // read_answer read to the end: tlcd closed the connection.
    drop(stream);
    let _ = writer.join();
    assert_eq!(tlcd.push_sparsity(&token), 1.0);
}

#[test]
fn numbers_beyond_their_bounds_are_refused() {
    let tlcd = Tlcd::start(&[], &[]);
    let token = auth(&tlcd.own_token());
    let memory = |tlcd: &Tlcd| {
        let answer = tlcd.send("GET", "/v1/config", &[token.as_ref_pair()], "");
        answer.json()["config"]["contexts"]["memory_mib"].clone()
    };
    let before = memory(&tlcd);
    let patch = |value: u64| {
        let body = json!({"contexts.memory_mib": value}).to_string();
        tlcd.send("PATCH", "/v1/config", &[JSON, token.as_ref_pair()], &body)
    };
    let answer = patch(99_999_999);
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(
        answer.error(),
        "contexts.memory_mib = 99999999: 1 to 1048576 (MiB, 1 TiB)"
    );
    assert_eq!(memory(&tlcd), before);
    let answer = patch(1_048_577);
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(memory(&tlcd), before);
    let answer = patch(1_048_576);
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(memory(&tlcd), json!(1_048_576));

    // The same bound from the environment stops tlcd at start.
    let stderr = start_fails(&[], &[("TLC_CONTEXTS__MEMORY_MIB", "99999999")]);
    assert!(
        stderr.contains("contexts.memory_mib = 99999999: 1 to 1048576 (MiB, 1 TiB)"),
        "{stderr}"
    );
}

/// Runs a tlcd that must exit with an error at start; its stderr.
fn start_fails(args: &[&str], env: &[(&str, &str)]) -> String {
    let runtime = tempfile::tempdir().expect("temp dir");
    let mut child = tlcd_command(free_addr(), runtime.path(), args, env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tlcd");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tlcd started when it should have refused to");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    stderr
}

#[test]
fn a_bad_token_file_stops_tlcd_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing").to_string_lossy().to_string();
    let stderr = start_fails(&["--admin-token-file", &missing], &[]);
    assert!(
        stderr.contains(&format!("admin.token_file = {missing}"))
            && stderr.contains("cannot read the admin token file"),
        "{stderr}"
    );

    let short = dir.path().join("short");
    std::fs::write(&short, "fifteen-bytes!!\n").expect("write");
    let short = short.to_string_lossy().to_string();
    let stderr = start_fails(&[], &[("TLC_ADMIN_TOKEN_FILE", &short)]);
    assert!(
        stderr.contains("is 15 bytes; a token has at least 16"),
        "{stderr}"
    );

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let stderr = start_fails(&["--admin-token-file", &empty.to_string_lossy()], &[]);
    assert!(stderr.contains("is empty"), "{stderr}");

    // No way to turn authentication off but turning the API off.
    let stderr = start_fails(&[], &[("TLC_ADMIN__TOKEN_FILE", "")]);
    assert!(
        stderr.contains("admin.token_file = \"\"") && stderr.contains("admin.listen = \"off\""),
        "{stderr}"
    );
}
