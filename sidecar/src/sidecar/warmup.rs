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
use tlc_context::{ContextMemory, ContextTable};
use tlc_core::{TensorCall, TensorKey};

/// Calls counted so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count(pub u64);

impl ContextMemory for Count {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<TensorKey>() + 64
    }
}

/// Counts one call of `call`'s tensor in `table`, unless its count has
/// reached `cap`; returns the count before this call.
pub(crate) fn count_call(
    table: &ContextTable<TensorKey, Count>,
    call: &TensorCall,
    cap: u64,
) -> u64 {
    let count = table.get_or_insert_with(&call.key(), Instant::now(), Count::default);
    let mut count = tlc_context::table::lock(&count);
    let before = count.0;
    if before < cap {
        count.0 += 1;
    }
    before
}

impl Sidecar {
    /// Counts one step of `call`'s tensor; true while it is still within
    /// the first `steps` (and should pass uncompressed).
    pub(crate) fn warming_up(&self, call: &TensorCall, steps: u32) -> bool {
        steps > 0 && count_call(&self.holder.warmup, call, u64::from(steps)) < u64::from(steps)
    }
}
