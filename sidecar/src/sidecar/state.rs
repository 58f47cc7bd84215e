//! What outsiders read of a sidecar as a whole: its counters, the sizes
//! of its context tables, the memory calls in flight hold, mutual TLS, and
//! training progress, the links. Each method answers one question with values (or
//! the counters, which only count), never a table or a lock to hold.

use std::time::Instant;

use super::stats::Stats;
use super::Sidecar;
use tlc_admin_api::status::{LinkRate, Links, Training};
use tlc_context::table::TableStats;
use tlc_proxy::tls::ReloadStats;

/// Sizes of the three context tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSizes {
    /// Holder side: push contexts (error buffers).
    pub push: TableStats,
    /// Holder side: pull sources (replicas and delta caches).
    pub pull: TableStats,
    /// Requester side: replicas.
    pub replicas: TableStats,
}

/// Memory calls in flight hold, against what they may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Held now: responses read whole, envelopes, decoded tensors, bytes
    /// streamed to a peer not yet written.
    pub in_use_bytes: u64,
    /// The budget: what they may hold at most.
    pub budget_bytes: u64,
}

impl Sidecar {
    /// The links' rates as measured here, and the switches made on them,
    /// as the admin API says them.
    pub fn link_view(&self) -> Links {
        let (switched_to_raw, switched_to_compressed) = self.holder.payoffs.switches();
        let rates = self.link_meter.rates(Instant::now()).into_iter();
        Links {
            mode: self.policy().link().mode.name().to_string(),
            rates: rates
                .map(|(peer, bytes_per_second)| LinkRate {
                    peer,
                    bytes_per_second,
                })
                .collect(),
            switched_to_raw,
            switched_to_compressed,
            settled: self.holder.payoffs.settles(),
        }
    }

    /// Originals kept for fallbacks now, and their bytes.
    pub fn fallbacks_kept(&self) -> (usize, usize) {
        self.holder.fallbacks.len_and_bytes()
    }

    /// What happened so far: the counters, for their totals, the summary
    /// line and the metrics' series.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Contexts held and their memory, per table.
    pub fn table_sizes(&self) -> TableSizes {
        TableSizes {
            push: self.contexts.push().stats(),
            pull: self.contexts.pull().stats(),
            replicas: self.contexts.replicas().table().stats(),
        }
    }

    /// The in-flight memory budget's use now.
    pub fn in_flight(&self) -> InFlight {
        InFlight {
            in_use_bytes: self.budget.in_use_bytes(),
            budget_bytes: self.budget.total_bytes(),
        }
    }

    /// Mutual TLS between sidecars: reloads and the certificate's expiry;
    /// `None` until a proxy has loaded it (or without `[tls]`).
    pub fn tls_status(&self) -> Option<ReloadStats> {
        self.tls.get().map(|tls| tls.reload_stats())
    }

    /// Training progress as the step counter reads showed it, at `now`.
    pub fn training_view(&self, now: Instant) -> Training {
        self.steps.view(now)
    }
}
