//! What peers and clients make the sidecar hold, against its bounds
//! (`[limits]`): connections open and refused, and the in-flight memory
//! budget; and the state of mutual TLS with them. Read when scraped, like
//! the tables' sizes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::sidecar::Sidecar;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

fn gauge(value: u64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    gauge
}

/// Registers the connection and in-flight memory series of `sidecar`.
pub fn register(registry: &mut Registry, sidecar: &Sidecar) {
    let connections = &sidecar.stats.connections;
    registry.register(
        "connections_open",
        "Connections being served, every listener",
        gauge(connections.open_now()),
    );
    let refused = Family::<RefusalLabel, Counter>::default();
    for (why, n) in connections.refusals() {
        refused
            .get_or_create(&RefusalLabel { reason: why.name() })
            .inc_by(n);
    }
    registry.register(
        "connections_refused",
        "Connections closed before being served: limit (limits.max_connections), handshake \
         (no HTTP/2 preface in time), not_http2, tls (handshake failed or TLS where none is \
         configured), upstream_unreachable",
        refused,
    );
    let idle = Counter::<u64>::default();
    idle.inc_by(connections.idle_closed_total());
    registry.register(
        "connections_idle_closed",
        "Peer connections closed gracefully after limits.idle_seconds without a call",
        idle,
    );
    registry.register_with_unit(
        "in_flight",
        "Memory calls in flight hold now: responses read whole, envelopes, decoded tensors, \
         bytes streamed to a peer not yet written",
        Unit::Bytes,
        gauge(sidecar.budget.in_use_bytes()),
    );
    if let Some(tls) = sidecar.tls.get() {
        let stats = tls.reload_stats();
        registry.register_with_unit(
            "tls_cert_not_after",
            "When this sidecar's TLS certificate expires, seconds since the epoch (alert well \
             before: peers refuse an expired certificate)",
            Unit::Seconds,
            gauge(u64::try_from(stats.not_after_unix).unwrap_or(0)),
        );
        let reloads = Family::<ResultLabel, Counter>::default();
        reloads
            .get_or_create(&ResultLabel { result: "ok" })
            .inc_by(stats.successes);
        reloads
            .get_or_create(&ResultLabel { result: "error" })
            .inc_by(stats.failures);
        registry.register(
            "tls_reloads",
            "Changed certificate files taken (ok) or refused, the previous ones kept (error)",
            reloads,
        );
    }
    registry.register_with_unit(
        "in_flight_budget",
        "What calls in flight may hold at most (a quarter of limits.memory_mib)",
        Unit::Bytes,
        gauge(sidecar.budget.total_bytes()),
    );
}
