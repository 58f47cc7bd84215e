//! Two sidecars speaking mutual TLS to each other, with certificates from
//! `deploy/tls/make-certs.sh` (openssl): compression and fallbacks for the
//! authenticated peer only, plain forwarding for anyone else, and no
//! connection at all with a certificate the other side does not trust.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::tf::{call_as_peer, recv, start_tensor_server};
use support::Client;
use tlc_core::Role;
use tlc_proxy::connection::Refusal;
use tlc_proxy::tls::TlsSettings;
use tlc_proxy::Proxy;
use tlc_sidecar::Sidecar;
use tlc_wire::peer;
use tlc_wire::tf::RECV_TENSOR_PATH;

const KEY: &str = "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;/job:ps/replica:0/task:0/device:CPU:0;edge_3_g;0:0";
use support::certs::{make_certs, tls, PS, WORKER};

fn values() -> Vec<f32> {
    (0..40_000).map(|i| (i as f32 * 0.01).sin()).collect()
}

struct Job {
    _certs: tempfile::TempDir,
    dir: PathBuf,
    holder: Arc<Sidecar>,
    inbound: Proxy<Sidecar>,
}

impl Job {
    /// An outbound route to this job's holder under `tls`, for `requester`:
    /// the other end of every connection these tests make.
    async fn requester_proxy(&self, requester: &Arc<Sidecar>, tls: TlsSettings) -> Proxy<Sidecar> {
        let holder = self.inbound.local_addrs()[0];
        support::proxy_configured(Role::Outbound, holder, requester.clone(), |c| c.tls = tls).await
    }
}

/// A tensor server behind a holder sidecar that takes TLS from `worker`.
async fn holder_job() -> Job {
    holder_job_with(|tls| tls).await
}

/// [`holder_job`] with its TLS settings changed by `change`.
async fn holder_job_with(change: impl FnOnce(TlsSettings) -> TlsSettings) -> Job {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path().to_path_buf();
    make_certs(&dir, &["ps", "worker"]);
    let served = values();
    let tf = start_tensor_server(Arc::new(move |_, _| (vec![40_000], served.clone()))).await;
    let holder = support::metrics::compressing_unclassified();
    let settings = change(tls(&dir, "ps", &[WORKER]));
    let inbound =
        support::proxy_configured(Role::Inbound, tf, holder.clone(), |c| c.tls = settings).await;
    Job {
        _certs: certs,
        dir,
        holder,
        inbound,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_peers_get_compressed_tensors() {
    let job = holder_job().await;
    let requester = Arc::new(support::compressing_sidecar());
    let outbound = job
        .requester_proxy(&requester, tls(&job.dir, "worker", &[PS]))
        .await;
    let client = Client::connect(outbound.local_addrs()[0]).await;
    for step in 1..=3 {
        let got = recv(&client, KEY, step).await;
        let error: f32 = got
            .values
            .iter()
            .zip(values())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(error < 1e-2, "step {step}: max error {error}");
    }
    let totals = requester.stats().totals();
    assert_eq!(totals.restored, 3, "decoded, over TLS");
    assert_eq!(totals.decode_failures, 0);
    let sent = job.holder.stats().totals();
    assert!(sent.push.tensors + sent.pull.tensors >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_callers_are_refused_unless_a_rollout_accepts_them() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let job = holder_job().await;
    let mut tcp = tokio::net::TcpStream::connect(job.inbound.local_addrs()[0])
        .await
        .unwrap();
    // The HTTP/2 preface and an empty SETTINGS frame, as TensorFlow opens.
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tcp.read_to_end(&mut answer),
    )
    .await
    .expect("the connection is closed, not kept");
    assert!(
        read.is_err() || answer.is_empty(),
        "a plaintext caller got {} bytes of HTTP/2 back",
        answer.len()
    );
    let refused = job
        .holder
        .stats()
        .connections()
        .refusals()
        .find(|(why, _)| why.name() == "tls")
        .map_or(0, |(_, n)| n);
    assert_eq!(refused, 1, "counted as a TLS refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_callers_are_forwarded_untouched_and_get_no_fallback() {
    let job = holder_job_with(|tls| TlsSettings {
        accept_plaintext: true,
        ..tls
    })
    .await;
    // A plaintext client claiming to be a sidecar.
    let client = Client::connect(job.inbound.local_addrs()[0]).await;
    let reply = call_as_peer(&client, KEY, 1).await;
    assert!(
        !peer::has_envelope(&reply.headers),
        "no envelope for plaintext"
    );
    assert_eq!(reply.trailers["grpc-status"], "0");
    let got = recv(&client, KEY, 2).await;
    assert_eq!(got.values, values(), "TensorFlow's answer, exactly");
    let fallback = client
        .call(
            peer::FALLBACK_PATH,
            &[(peer::PEER, peer::PROTOCOL), (peer::FALLBACK, "1234")],
            Bytes::new(),
        )
        .await;
    assert_eq!(fallback.headers["grpc-status"], "7", "PERMISSION_DENIED");
    let totals = job.holder.stats().totals();
    assert_eq!(totals.push.tensors, 0);
    assert_eq!(totals.pull.tensors, 0);
    assert_eq!(totals.fallbacks_served, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_peer_does_not_trust_gets_no_connection() {
    let job = holder_job().await;
    // Same names, another CA: a stranger's certificate.
    let stranger = tempfile::tempdir().unwrap();
    make_certs(stranger.path(), &["worker"]);
    let mut settings = tls(stranger.path(), "worker", &[PS]);
    settings.ca = Some(job.dir.join("ca.pem"));
    let requester = Arc::new(support::compressing_sidecar());
    let outbound = job.requester_proxy(&requester, settings).await;
    // The requester's sidecar cannot reach its peer, so it does not serve
    // TensorFlow's connection: TF sees a refused connection and retries.
    let tcp = tokio::net::TcpStream::connect(outbound.local_addrs()[0])
        .await
        .unwrap();
    let handshake = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .handshake::<_, http_body_util::Full<Bytes>>(hyper_util::rt::TokioIo::new(tcp));
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        let (mut sender, connection) = handshake.await?;
        tokio::spawn(connection);
        let request = http::Request::post(format!("http://x{RECV_TENSOR_PATH}"))
            .header("content-type", "application/grpc")
            .body(http_body_util::Full::new(support::tf::request_body(KEY, 1)))
            .unwrap();
        sender.send_request(request).await
    })
    .await
    .expect("an answer within the timeout");
    assert!(result.is_err(), "no HTTP/2 service without a trusted peer");
    let refused = |sidecar: &Sidecar, why: Refusal| {
        sidecar
            .stats()
            .connections()
            .refusals()
            .find(|(r, _)| *r == why)
            .map_or(0, |(_, n)| n)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while refused(&job.holder, Refusal::Tls) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused(&requester, Refusal::Upstream), 1);
    assert_eq!(
        refused(&job.holder, Refusal::Tls),
        1,
        "the holder refused the stranger"
    );
}
