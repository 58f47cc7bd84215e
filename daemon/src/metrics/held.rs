//! What peers and clients make the sidecar hold, against its bounds
//! (`[limits]`): connections open and refused, the in-flight memory
//! budget, and the memory total every default bound is a share of; and
//! the state of mutual TLS with them. Read when scraped, like the tables'
//! sizes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use tlc_sidecar::sidecar::Sidecar;

use super::{counter_at, counters_by};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PartLabel {
    part: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CarriedLabel {
    carried: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

fn gauge(value: u64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    gauge
}

/// The sessions between sidecars (`tlc_proxy::mux`), process-wide.
fn register_sessions(registry: &mut Registry) {
    let c = tlc_proxy::mux::totals();
    let events = [
        ("opened", c.opened),
        ("refused", c.refused),
        ("served", c.served),
        ("broken", c.broken),
    ];
    registry.register(
        "peer_sessions",
        "Sessions between sidecars (peer_sessions): opened (to a peer's sidecar), refused (the \
         peer took none: a stream per call), served (opened by a peer), broken (ended on a \
         broken rule or stream; their calls in progress failed)",
        counters_by(events.map(|(event, n)| (EventLabel { event }, n))),
    );
    let carried = [("session", c.calls), ("stream", c.unsent)];
    let parts = [
        ("framing", c.framing_bytes),
        ("headers", c.header_bytes),
        ("data", c.data_bytes),
    ];
    registry.register_with_unit(
        "peer_session",
        "Bytes this sidecar wrote into sessions with peers' sidecars, by part: framing (batch \
         prefixes, flags, call ids, lengths, credits and resets), headers (the calls' head and \
         tail blocks), data (their bodies)",
        Unit::Bytes,
        counters_by(parts.map(|(part, n)| (PartLabel { part }, n))),
    );
    registry.register(
        "peer_session_calls",
        "Calls to a peer's sidecar while a session was open: carried in the session, or on a \
         stream of their own (a request not whole or over 64 KiB, the session full or going away)",
        counters_by(carried.map(|(carried, n)| (CarriedLabel { carried }, n))),
    );
}

/// Registers the connection and in-flight memory series of `sidecar`.
pub fn register(registry: &mut Registry, sidecar: &Sidecar) {
    let connections = sidecar.stats().connections();
    registry.register(
        "connections_open",
        "Connections being served, every listener",
        gauge(connections.open_now()),
    );
    // Refusals and cuts share the one label, `reason`.
    let by_reason = |reason: &'static str, n: u64| (RefusalLabel { reason }, n);
    let refused = counters_by(
        connections
            .refusals()
            .map(|(why, n)| by_reason(why.name(), n)),
    );
    registry.register(
        "connections_refused",
        "Connections closed before being served: limit (limits.max_connections), handshake \
         (no HTTP/2 preface, or no byte at all, in time), tls (handshake failed, TLS where \
         none is configured, plaintext that is not HTTP/2 where TLS is required), \
         upstream_unreachable, opaque_limit (not HTTP/2, over limits.max_opaque_connections)",
        refused,
    );
    registry.register(
        "connections_opaque",
        "Connections that did not speak HTTP/2, forwarded untouched (another protocol on an \
         intercepted port; nothing compressed)",
        counter_at(connections.opaque_total()),
    );
    let cut = counters_by(connections.cuts().map(|(why, n)| by_reason(why.name(), n)));
    registry.register(
        "connections_cut",
        "Connections closed hard, their client no longer waited for: opaque_idle (forwarded, \
         no byte for limits.opaque_idle_seconds), half_closed (forwarded, one side closed and \
         no byte for limits.close_seconds after), goaway_timeout (idle HTTP/2 connection not \
         closed limits.close_seconds after its GOAWAY)",
        cut,
    );
    registry.register(
        "connections_idle_closed",
        "Peer connections closed gracefully after limits.idle_seconds without a call",
        counter_at(connections.idle_closed_total()),
    );
    register_sessions(registry);
    let in_flight = sidecar.in_flight();
    registry.register_with_unit(
        "in_flight",
        "Memory calls in flight hold now: responses read whole, envelopes, decoded tensors, \
         bytes streamed to a peer not yet written",
        Unit::Bytes,
        gauge(in_flight.in_use_bytes),
    );
    if let Some(stats) = sidecar.tls_status() {
        registry.register_with_unit(
            "tls_cert_not_after",
            "When this sidecar's TLS certificate expires, seconds since the epoch (alert well \
             before: peers refuse an expired certificate)",
            Unit::Seconds,
            gauge(u64::try_from(stats.not_after_unix).unwrap_or(0)),
        );
        let reloads = counters_by([
            (ResultLabel { result: "ok" }, stats.successes),
            (ResultLabel { result: "error" }, stats.failures),
        ]);
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
        gauge(in_flight.budget_bytes),
    );
    // One series, whose label says where the figure came from: a
    // `fallback` total is an assumption, not the container's limit, and
    // RSS against it means little. `limits` is restart-only, so the
    // figure never changes while tlcd runs.
    let total = sidecar.options().memory;
    let limit = Family::<SourceLabel, Gauge>::default();
    limit
        .get_or_create(&SourceLabel {
            source: total.origin.name(),
        })
        .set(i64::try_from(total.bytes).unwrap_or(i64::MAX));
    registry.register_with_unit(
        "memory_limit",
        "Memory tlcd may use in all, which its default bounds are shares of: limits.memory_mib \
         (source=config), else the container's cgroup limit (cgroup), else 4 GiB (fallback)",
        Unit::Bytes,
        limit,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlc_proxy::limits::memory::{self, Origin};
    use tlc_proxy::limits::settings::LimitSettings;
    use tlc_sidecar::policy::Policy;
    use tlc_sidecar::sidecar::Options;

    fn render(sidecar: &Sidecar) -> String {
        let mut registry = Registry::with_prefix("tlc");
        register(&mut registry, sidecar);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn limit_lines(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| l.starts_with("tlc_memory_limit_bytes"))
            .collect()
    }

    #[test]
    fn the_memory_limit_is_one_series_saying_where_it_came_from() {
        let configured = LimitSettings {
            memory_mib: Some(512),
            ..Default::default()
        };
        let options = Options::within(&configured.limits().unwrap());
        let text = render(&Sidecar::new(Policy::default(), options, None));
        assert_eq!(
            limit_lines(&text),
            [r#"tlc_memory_limit_bytes{source="config"} 536870912"#],
            "{text}"
        );
        assert!(
            text.contains("# UNIT tlc_memory_limit_bytes bytes"),
            "{text}"
        );
        // The in-flight budget is its quarter.
        assert!(
            text.lines()
                .any(|l| l == "tlc_in_flight_budget_bytes 134217728"),
            "{text}"
        );

        // Unset: whatever this machine's cgroup says, or the fallback.
        let detected = memory::detected().total();
        assert_ne!(detected.origin, Origin::Config);
        let text = render(&Sidecar::default());
        assert_eq!(
            limit_lines(&text),
            [format!(
                "tlc_memory_limit_bytes{{source=\"{}\"}} {}",
                detected.origin.name(),
                detected.bytes
            )],
            "{text}"
        );
    }

    #[test]
    fn every_refusal_and_cut_has_its_series() {
        let text = render(&Sidecar::default());
        for line in [
            r#"tlc_connections_refused_total{reason="opaque_limit"} 0"#,
            r#"tlc_connections_cut_total{reason="opaque_idle"} 0"#,
            r#"tlc_connections_cut_total{reason="half_closed"} 0"#,
            r#"tlc_connections_cut_total{reason="goaway_timeout"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
