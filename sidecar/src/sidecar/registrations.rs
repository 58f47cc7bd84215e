//! Graph registrations on their way through the sidecar: each call's body
//! is read by a tap ([`crate::graph::tap`]) within the sidecar's bounds,
//! and the call goes on untouched whatever the tap makes of it.

use std::sync::Arc;

use http::Request;
use tlc_proxy::body::ProxyBody;

use super::pass::PassReason;
use super::{Sidecar, MAX_GRAPH_MESSAGE};
use crate::graph::tap::{self, Registration};

impl Sidecar {
    /// `request` with its body read on its way as a graph registration:
    /// within `limits.gather_seconds` a message, what it holds charged to
    /// the in-flight budget; a tap that cannot is given up on (counted as
    /// `tlc_passthrough_total{reason="graph_unread"}`, the first logged).
    pub(super) fn tap(
        sidecar: &Arc<Self>,
        registration: Registration,
        request: Request<ProxyBody>,
    ) -> Request<ProxyBody> {
        let (parts, body) = request.into_parts();
        let hook = sidecar.recorder.clone().map(|recorder| {
            Box::new(move |kind: Registration, message: &[u8]| {
                recorder.write_graph(kind.name(), message)
            }) as tap::MessageHook
        });
        let weak = Arc::downgrade(sidecar);
        let gave_up = Box::new(move |reason: &'static str| {
            let first = weak
                .upgrade()
                .is_some_and(|s| s.stats.passed(&PassReason::GraphUnread));
            if first {
                tracing::warn!(
                    reason,
                    "a graph registration was not read (it went on to TensorFlow as it was): \
                     its tensors stay unclassified; tlc_passthrough_total{{reason=\"graph_unread\"}} \
                     counts the rest"
                );
            }
        }) as tap::GiveUpHook;
        let settings = tap::TapSettings {
            limit: MAX_GRAPH_MESSAGE,
            gather: sidecar.options.gather,
            budget: sidecar.budget.clone(),
            hook,
            gave_up: Some(gave_up),
        };
        let body = tap::tap(body, registration, sidecar.graphs.clone(), settings);
        Request::from_parts(parts, body)
    }
}
