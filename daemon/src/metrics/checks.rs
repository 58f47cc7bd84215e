//! What the operator's checks found (`[policy.check]`, see
//! [`tlc_sidecar::policy::CheckSettings`]): mirror checks that matched and
//! that did not, and calls forced exact. Read when scraped.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

use tlc_sidecar::sidecar::stats::Totals;

use super::{counter_at, counters_by};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Registers the check series of `totals`.
pub fn register(registry: &mut Registry, totals: &Totals) {
    let mirror = counters_by([
        (ResultLabel { result: "match" }, totals.mirror_matches),
        (ResultLabel { result: "mismatch" }, totals.mirror_mismatches),
    ]);
    registry.register(
        "mirror_checks",
        "Restored tensors checked against the holder's hash of what this side should hand \
         TensorFlow (policy.check.mirror; decoding side); on a mismatch TensorFlow got the \
         original instead",
        mirror,
    );
    registry.register(
        "forced_exact_calls",
        "Calls sent exactly through their memory because policy.check.exact_at_call named them \
         (encoding side)",
        counter_at(totals.forced_exact),
    );
}
