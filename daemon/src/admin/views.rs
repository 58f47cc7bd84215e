//! The admin API's answers, made from the sidecar and the running
//! configuration: the types of `tlc_admin_api`, filled in.

use tlc_admin_api as api;
use tlc_admin_api::status::{Contexts, DirectionTotals, TableSize, Totals, Training};
use tlc_admin_api::tensors::QueryError;
use tlc_admin_api::{ConfigView, PolicyView, SortField, Tensors, TensorsQuery};

use crate::config::layers::Resolved;
use crate::config::LogFormat;
use tlc_context::table::TableStats;
use tlc_core::{Direction, Role};
use tlc_proxy::{Listener, Target};
use tlc_sidecar::policy::{codec_view, Policy};
use tlc_sidecar::sidecar::stats::Sent;
use tlc_sidecar::sidecar::Sidecar;

/// `GET /v1/config`: the configuration and the origin of each value.
pub fn config(resolved: &Resolved) -> Result<ConfigView, serde_json::Error> {
    Ok(ConfigView {
        config: serde_json::to_value(&resolved.config)?,
        sources: resolved
            .sources
            .iter()
            .map(|(key, origin)| (key.clone(), origin.to_string()))
            .collect(),
    })
}

/// The policy in force, as operators read it.
pub fn policy(policy: &Policy) -> PolicyView {
    PolicyView {
        push: codec_view(policy.codec_for(Direction::Push).codec),
        pull: codec_view(policy.codec_for(Direction::Pull).codec),
        min_bytes: policy.min_bytes(),
        overrides: policy.overrides() as u64,
    }
}

/// One listener.
pub fn listener(listener: &Listener) -> api::status::Listener {
    let target = match &listener.target {
        Target::Fixed(addr) => addr.to_string(),
        Target::OriginalDestination => "original-destination".into(),
    };
    api::status::Listener {
        listen: listener.listen.to_string(),
        role: match listener.role {
            Role::Outbound => api::status::Role::Outbound,
            Role::Inbound => api::status::Role::Inbound,
        },
        target,
    }
}

/// `human` or `json`, as in the config file.
pub fn log_format(format: LogFormat) -> String {
    match format {
        LogFormat::Human => "human",
        LogFormat::Json => "json",
    }
    .to_string()
}

/// Size of one context table.
pub fn table(stats: TableStats) -> TableSize {
    TableSize {
        contexts: stats.contexts as u64,
        memory_bytes: stats.memory_bytes as u64,
    }
}

/// The contexts the sidecar holds, by kind.
pub fn contexts(sidecar: &Sidecar) -> Contexts {
    let sizes = sidecar.table_sizes();
    Contexts {
        push: table(sizes.push),
        pull: table(sizes.pull),
        replicas: table(sizes.replicas),
        rows: {
            let rows = sidecar.row_contexts().sizes();
            TableSize {
                contexts: rows.iter().map(|t| t.contexts as u64).sum(),
                memory_bytes: rows.iter().map(|t| t.memory_bytes as u64).sum(),
            }
        },
    }
}

/// The process's sessions with peers' sidecars.
fn sessions() -> api::status::SessionTotals {
    let c = tlc_proxy::mux::totals();
    api::status::SessionTotals {
        opened: c.opened,
        refused: c.refused,
        served: c.served,
        broken: c.broken,
        calls: c.calls,
        calls_on_streams: c.unsent,
    }
}

/// The sidecar's running totals.
pub fn totals(sidecar: &Sidecar) -> Totals {
    let totals = sidecar.stats().totals();
    let direction = |sent: &Sent| DirectionTotals {
        tensors: sent.tensors,
        raw_bytes: sent.raw_bytes,
        wire_bytes: sent.wire_bytes,
        ratio: sent.ratio(),
    };
    Totals {
        push: direction(&totals.push),
        pull: direction(&totals.pull),
        restored: totals.restored,
        decode_failures: totals.decode_failures,
        fallbacks: totals.fallbacks,
        fallbacks_served: totals.fallbacks_served,
        passed: totals
            .passed
            .into_iter()
            .map(|(reason, n)| (reason.to_string(), n))
            .collect(),
        rows: {
            let c = &sidecar.row_contexts().counters;
            let read =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            api::status::RowTotals {
                hits: read(&c.hits),
                new: read(&c.misses),
                evictions: read(&c.evictions),
                without_ids: read(&c.no_ids),
            }
        },
        hop: api::status::HopTotals {
            sent_raw_bytes: totals.hop.compressed.raw_bytes,
            sent_wire_bytes: totals.hop.compressed.wire_bytes,
            received_wire_bytes: totals.hop.restored.wire_bytes,
            received_raw_bytes: totals.hop.restored.raw_bytes,
            failures: totals.hop.failures,
            unshrunk_bytes: totals.hop.unshrunk_bytes,
        },
        sessions: sessions(),
    }
}

/// What the step watch saw: the global step, and the times it went back.
pub fn training(sidecar: &Sidecar) -> Training {
    sidecar.training_view(std::time::Instant::now())
}

/// The links' rates and the decisions made on them.
pub fn links(sidecar: &Sidecar) -> api::status::Links {
    sidecar.link_view()
}

/// `GET /v1/tensors?sort=FIELD&limit=N`: names ascending, numbers
/// descending (the largest first, as in `top`).
pub fn tensors(sidecar: &Sidecar, query: &str) -> Result<Tensors, QueryError> {
    let query = TensorsQuery::parse(query)?;
    let sort = query.sort.unwrap_or(SortField::WireBytes);
    let mut rows = sidecar.tensors();
    rows.sort_by(|a, b| sort.compare(a, b));
    if let Some(limit) = query.limit {
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(Tensors { tensors: rows })
}
