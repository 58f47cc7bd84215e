//! The emulated deployment: one pod per task, each with its TensorFlow
//! stand-in, its own `tlcd` (an independent [`Sidecar`], so contexts live
//! where they would in a real deployment) and its own network interface.
//!
//! ```text
//!  worker i pod                                            ps pod
//!  TF client ─▶ sidecar outbound ═══ link ═══▶ sidecar inbound ─▶ TF server   (pulls)
//!  TF server ◀─ sidecar inbound  ◀══ link ═══ sidecar outbound ◀─ TF client   (gradients)
//! ```
//!
//! Only the hop between two sidecars crosses the link; a task talks to its
//! own sidecar locally, as it does through loopback or iptables in a pod.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::future::join_all;

use tlc_core::Role;
use tlc_proxy::limits::settings::LimitSettings;
use tlc_proxy::{Listener, Proxy, ProxySettings, Target};
use tlc_sidecar::policy::{Policy, PolicySettings};
use tlc_sidecar::{Options, Sidecar};

use super::link::{Nic, Relay};
use super::wire::{Handler, Server};

/// How to build the pods.
#[derive(Debug, Clone)]
pub struct PodsSpec {
    /// Number of worker pods.
    pub workers: usize,
    /// Every sidecar's policy.
    pub policy: PolicySettings,
    /// Each pod's link rate each way, in Mbit/s (`None`: unlimited).
    pub rate_mbit: Option<f64>,
    /// Latency added to every byte between pods, each way.
    pub latency: Duration,
}

/// One pod: a task's server, its sidecar and its network interface.
pub struct Pod {
    /// The pod's network interface.
    pub nic: Arc<Nic>,
    /// The pod's sidecar.
    pub sidecar: Arc<Sidecar>,
    /// Where the pod's task dials its peers: the sidecar's outbound routes,
    /// one per peer (for a worker: the parameter task; for the parameter
    /// task: worker 0, worker 1, …).
    pub peers: Vec<SocketAddr>,
    server: Server,
}

/// Every pod of the job and the relays between them.
pub struct Pods {
    /// The parameter task's pod.
    pub ps: Pod,
    /// The workers' pods.
    pub workers: Vec<Pod>,
    relays: Vec<Relay>,
    proxies: Vec<Proxy<Sidecar>>,
}

/// A proxy of `sidecar` with one route per upstream.
async fn proxy(
    sidecar: &Arc<Sidecar>,
    role: Role,
    upstreams: &[SocketAddr],
) -> Result<Proxy<Sidecar>> {
    let settings = ProxySettings {
        listeners: upstreams
            .iter()
            .map(|&upstream| Listener {
                listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                target: Target::Fixed(upstream.into()),
                role,
            })
            .collect(),
        limits: LimitSettings::default().limits()?,
        tls: Default::default(),
        drain: Duration::from_secs(1),
        sessions: true,
    };
    Ok(Proxy::start(&settings, sidecar.clone()).await?)
}

impl Pods {
    /// Starts the parameter task's server with `ps`, worker `i`'s with
    /// `workers[i]`, every sidecar, and the relays between pods.
    pub async fn start(spec: &PodsSpec, ps: Handler, workers: Vec<Handler>) -> Result<Pods> {
        let sidecar = || -> Result<Arc<Sidecar>> {
            let policy = Policy::new(&spec.policy).context("demo sidecar policy")?;
            Ok(Arc::new(Sidecar::new(policy, Options::default(), None)))
        };
        let mut proxies = Vec::new();
        let mut relays = Vec::new();

        // Servers and inbound routes first: the outbound routes point at them.
        let ps_server = Server::start(ps).await.context("parameter task server")?;
        let ps_sidecar = sidecar()?;
        let ps_nic = Nic::new("ps", spec.rate_mbit);
        let ps_inbound = proxy(&ps_sidecar, Role::Inbound, &[ps_server.addr()]).await?;
        let ps_inbound_addr = ps_inbound.local_addrs()[0];
        proxies.push(ps_inbound);

        let mut worker_pods = Vec::new();
        let mut to_workers = Vec::new();
        for (i, handler) in workers.into_iter().enumerate() {
            let server = Server::start(handler)
                .await
                .with_context(|| format!("worker {i} server"))?;
            let sidecar = sidecar()?;
            let nic = Nic::new(&format!("worker{i}"), spec.rate_mbit);
            let inbound = proxy(&sidecar, Role::Inbound, &[server.addr()]).await?;
            // The parameter task dials this worker's sidecar across both links …
            let to_worker = Relay::start(
                ps_nic.clone(),
                nic.clone(),
                inbound.local_addrs()[0],
                spec.latency,
            )
            .await
            .context("relay to a worker")?;
            // … and this worker dials the parameter task's sidecar.
            let to_ps = Relay::start(nic.clone(), ps_nic.clone(), ps_inbound_addr, spec.latency)
                .await
                .context("relay to the parameter task")?;
            let outbound = proxy(&sidecar, Role::Outbound, &[to_ps.addr()]).await?;
            worker_pods.push(Pod {
                nic,
                sidecar,
                peers: outbound.local_addrs().to_vec(),
                server,
            });
            to_workers.push(to_worker.addr());
            relays.extend([to_worker, to_ps]);
            proxies.extend([inbound, outbound]);
        }
        let ps_outbound = proxy(&ps_sidecar, Role::Outbound, &to_workers).await?;
        let ps_pod = Pod {
            nic: ps_nic,
            sidecar: ps_sidecar,
            peers: ps_outbound.local_addrs().to_vec(),
            server: ps_server,
        };
        proxies.push(ps_outbound);
        Ok(Pods {
            ps: ps_pod,
            workers: worker_pods,
            relays,
            proxies,
        })
    }

    /// Every sidecar: the parameter task's first, then the workers'.
    pub fn sidecars(&self) -> impl Iterator<Item = &Arc<Sidecar>> {
        std::iter::once(&self.ps)
            .chain(&self.workers)
            .map(|p| &p.sidecar)
    }

    /// Bytes that crossed the links between pods, both directions.
    pub fn link_bytes(&self) -> u64 {
        self.relays
            .iter()
            .map(|r| {
                let (forward, backward) = r.bytes();
                forward + backward
            })
            .sum()
    }

    /// Stops every sidecar, server and relay.
    pub async fn shutdown(self) {
        join_all(self.proxies.into_iter().map(Proxy::shutdown)).await;
        let servers =
            std::iter::once(self.ps.server).chain(self.workers.into_iter().map(|p| p.server));
        join_all(servers.map(Server::shutdown)).await;
        join_all(self.relays.into_iter().map(Relay::shutdown)).await;
    }
}
