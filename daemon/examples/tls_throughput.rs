//! What mutual TLS between sidecars costs: pushes the same bytes (default
//! 1 GiB, in 1 MiB writes) through one loopback TCP connection, plain and
//! through [`TlsContext`] on both ends (rustls, ring, TLS 1.3), in one
//! process, and prints throughput and the CPU time (user + system, both
//! ends together, from `getrusage`) per GiB.
//!
//! `cargo run --release -p tlc-daemon --example tls_throughput [-- --mib 1024]`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};
use tlc_proxy::tls::{TlsContext, TlsMode, TlsSettings};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WRITE: usize = 1 << 20;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass and nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// A CA and one leaf for `name`, written as `name.pem`, `name-key.pem` and
/// `ca.pem` under `dir`; settings that accept any `spiffe://bench/*` peer.
fn files(dir: &std::path::Path, names: &[&str]) -> Result<Vec<TlsSettings>> {
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    std::fs::write(dir.join("ca.pem"), ca.self_signed(&ca_key)?.pem())?;
    let issuer = Issuer::new(ca, ca_key);
    let mut settings = Vec::new();
    for name in names {
        let mut leaf = CertificateParams::default();
        leaf.subject_alt_names = vec![SanType::URI(format!("spiffe://bench/{name}").try_into()?)];
        leaf.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &issuer)?;
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem())?;
        settings.push(TlsSettings {
            mode: TlsMode::Mutual,
            cert: Some(dir.join(format!("{name}.pem"))),
            key: Some(dir.join(format!("{name}-key.pem"))),
            ca: Some(dir.join("ca.pem")),
            peer_identities: vec!["spiffe://bench/*".into()],
            reload_seconds: 10,
            ..Default::default()
        });
    }
    Ok(settings)
}

/// Reads until the end, returns the byte count.
async fn drain<S: AsyncRead + Unpin>(mut stream: S) -> std::io::Result<u64> {
    let mut buf = vec![0u8; WRITE];
    let mut total = 0u64;
    loop {
        match stream.read(&mut buf).await? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

async fn push<S: AsyncWrite + Unpin>(mut stream: S, total: u64) -> std::io::Result<()> {
    let chunk = vec![0x5au8; WRITE];
    let mut sent = 0u64;
    while sent < total {
        let n = (total - sent).min(WRITE as u64) as usize;
        stream.write_all(&chunk[..n]).await?;
        sent += n as u64;
    }
    stream.shutdown().await
}

struct Run {
    seconds: f64,
    cpu: f64,
}

async fn run(total: u64, tls: Option<(Arc<TlsContext>, Arc<TlsContext>)>) -> Result<Run> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr: SocketAddr = listener.local_addr()?;
    let server_tls = tls.as_ref().map(|(server, _)| server.clone());
    let receiver = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let received = match server_tls {
            Some(tls) => drain(tls.accept(tcp).await?.0).await?,
            None => drain(tcp).await?,
        };
        anyhow::Ok(received)
    });
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    // The handshake is not what is measured.
    let (cpu0, t0) = match &tls {
        Some((_, client)) => {
            let (stream, _) = client.connect(addr, tcp).await?;
            let suite = stream.get_ref().1.negotiated_cipher_suite();
            println!("  cipher suite {:?}", suite.map(|s| s.suite()));
            let start = (cpu_seconds(), Instant::now());
            push(stream, total).await?;
            start
        }
        None => {
            let start = (cpu_seconds(), Instant::now());
            push(tcp, total).await?;
            start
        }
    };
    let received = receiver.await??;
    let run = Run {
        seconds: t0.elapsed().as_secs_f64(),
        cpu: cpu_seconds() - cpu0,
    };
    if received != total {
        bail!("received {received} of {total} bytes");
    }
    Ok(run)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mib: u64 = match args.iter().position(|a| a == "--mib") {
        Some(i) => args.get(i + 1).context("--mib N")?.parse()?,
        None => 1024,
    };
    let total = mib << 20;
    let gib = total as f64 / (1u64 << 30) as f64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let dir = tempfile::tempdir()?;
        let settings = files(dir.path(), &["server", "client"])?;
        let server = Arc::new(TlsContext::load(&settings[0])?);
        let client = Arc::new(TlsContext::load(&settings[1])?);
        println!("{mib} MiB over loopback in {} KiB writes", WRITE >> 10);
        let mut results = Vec::new();
        for (label, tls) in [
            ("plain TCP", None),
            ("mutual TLS", Some((server.clone(), client.clone()))),
        ] {
            println!("{label}:");
            let r = run(total, tls).await?;
            println!(
                "  {:.2} s, {:.2} GiB/s ({:.1} Gbit/s), CPU {:.2} s = {:.2} CPU s/GiB",
                r.seconds,
                gib / r.seconds,
                total as f64 * 8.0 / r.seconds / 1e9,
                r.cpu,
                r.cpu / gib
            );
            results.push(r);
        }
        let (plain, tls) = (&results[0], &results[1]);
        println!(
            "TLS adds {:.2} CPU s/GiB (both ends), {:.1}x the plain CPU",
            (tls.cpu - plain.cpu) / gib,
            tls.cpu / plain.cpu
        );
        anyhow::Ok(())
    })
}
