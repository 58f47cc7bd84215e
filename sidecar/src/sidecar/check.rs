//! `[policy.check]` (see [`crate::policy::CheckSettings`]) on the call
//! path: the call of each tensor forced exact, and the requester's side
//! of the mirror check.
//!
//! The call counts live in their own bounded table, only while
//! `exact_at_call` is set. A count evicted for being idle starts again,
//! which at worst forces a second exact call: exact is always correct.

use tracing::error;

use super::warmup::count_call;
use super::Sidecar;
use tlc_core::TensorCall;

impl Sidecar {
    /// Counts one call of `call`'s tensor; true if it is call number `at`
    /// (from 1), which crosses exactly. Counts nothing when `at` is 0.
    pub(crate) fn forced_exact(&self, call: &TensorCall, at: u64) -> bool {
        if at == 0 {
            return false;
        }
        count_call(&self.holder.calls, call, u64::MAX) + 1 == at
    }

    /// Checks `content`, the f32 bytes restored for `call`, against the
    /// holder's `expected` hash (its `tlc-mirror`); no hash, no check.
    /// A mismatch is logged and counted, and `Err` says why: the caller
    /// then hands TensorFlow the original instead.
    pub(crate) fn check_mirror(
        &self,
        call: &TensorCall,
        expected: Option<u64>,
        content: &[u8],
    ) -> Result<(), &'static str> {
        let Some(expected) = expected else {
            return Ok(());
        };
        // The same bytes `replica_hash` hashes: f32 little-endian.
        let got = xxhash_rust::xxh3::xxh3_64(content);
        let matched = got == expected;
        self.stats.mirror_checked(matched);
        if matched {
            return Ok(());
        }
        error!(
            tensor = %call.tensor,
            holder = %call.holder_task,
            direction = call.direction.name(),
            expected = format_args!("{expected:016x}"),
            got = format_args!("{got:016x}"),
            "mirror check: what this side restored is not what the holder sent \
             (replicas apart, or a decode that differs); handing TensorFlow the original"
        );
        Err("mirror check failed: restored values differ from the holder's")
    }
}
