//! Warm-up: a dense tensor crosses uncompressed (or with the nearly
//! lossless `policy.warmup_codec`, through its own error buffer or
//! replica) for its first `policy.warmup_steps` steps, counted per tensor
//! and requesting task.
//! Error feedback and pull deltas lag most while the model moves fastest,
//! early in training; users of other compressors expect this knob
//! (DeepSpeed's `freeze_step`, PowerSGD's `start_powerSGD_iter`).
//!
//! The counts live in their own bounded table. A count evicted for being
//! idle starts again, which only costs bytes: an uncompressed tensor is
//! always correct, and a pull that follows is a keyframe.

use std::time::Instant;

use super::Sidecar;
use tlc_context::ContextMemory;
use tlc_core::TensorCall;

/// One tensor for one requesting task.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WarmupKey {
    /// The task asking.
    pub requester: String,
    /// The holder's task.
    pub holder: String,
    /// The tensor's context name.
    pub tensor: String,
}

/// Steps seen so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Steps(pub u32);

impl ContextMemory for Steps {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<WarmupKey>() + 64
    }
}

impl Sidecar {
    /// Counts one step of `call`'s tensor; true while it is still within
    /// the first `steps` (and should pass uncompressed).
    pub(crate) fn warming_up(&self, call: &TensorCall, steps: u32) -> bool {
        if steps == 0 {
            return false;
        }
        let key = WarmupKey {
            requester: call.requester_task.clone(),
            holder: call.holder_task.clone(),
            tensor: call.tensor.clone(),
        };
        let count = self
            .warmup
            .get_or_insert_with(&key, Instant::now(), Steps::default);
        let mut count = tlc_context::table::lock(&count);
        if count.0 >= steps {
            return false;
        }
        count.0 += 1;
        true
    }
}
