//! The one tokio runtime a target drives its async calls on
//! (`fallback_call`, `recv_tensor_request`): made once, not per input.

use std::sync::OnceLock;

/// A current-thread runtime, built on first use.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}
