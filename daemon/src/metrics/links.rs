//! The links as the sidecar measured them (`[policy.link]`, see
//! [`tlc_sidecar::link`]): each holder's rate, the tensors that switched
//! between raw and compressed, and the originals kept for fallbacks.
//! Read when scraped.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use tlc_sidecar::sidecar::Sidecar;

use super::{counter_at, counters_by};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PeerLabel {
    peer: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToLabel {
    to: &'static str,
}

/// Registers the link series of `sidecar`.
pub fn register(registry: &mut Registry, sidecar: &Sidecar) {
    let view = sidecar.link_view();
    let rates = Family::<PeerLabel, Gauge<f64, AtomicU64>>::default();
    for rate in view.rates {
        let peer = rate.peer;
        rates
            .get_or_create(&PeerLabel { peer })
            .set(rate.bytes_per_second);
    }
    registry.register_with_unit(
        "link_rate",
        "The rate a holder task's answers arrive at, as this (requesting) sidecar measured it; \
         compared with each tensor's break-even rate to decide whether compressing it pays",
        Unit::Other("bytes_per_second".into()),
        rates,
    );
    let switches = counters_by([
        (ToLabel { to: "raw" }, view.switched_to_raw),
        (ToLabel { to: "compressed" }, view.switched_to_compressed),
    ]);
    registry.register(
        "link_switches",
        "Times a tensor switched to crossing raw (its link faster than compressing) or back to \
         compressed (holder side)",
        switches,
    );
    registry.register(
        "link_settles",
        "Calls sent exactly through a tensor's memory where the link decision mixes raw and \
         compressed calls: a push's pending error, a pull's replica brought to the model \
         (holder side)",
        counter_at(view.settled),
    );
    let (_, bytes) = sidecar.fallbacks_kept();
    let kept = Gauge::<i64>::default();
    kept.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    registry.register_with_unit(
        "fallback_kept",
        "Original responses kept in case a requester cannot decode their envelope (holder side)",
        Unit::Bytes,
        kept,
    );
}
