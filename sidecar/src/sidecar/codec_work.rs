//! Where a call's codec work runs: on the runtime thread that holds the
//! call when the tensor is small, off it (`block_in_place`) when it is
//! large.
//!
//! `block_in_place` hands the thread's other tasks to a fresh runtime
//! thread before the work starts, which costs a thread wake-up and two
//! context switches. A batch-norm ResNet's tensors are mostly a few KiB
//! to a few hundred: there the hand-over cost more than encoding the
//! tensor, and it happened on every compressed call on both sidecars.
//! Below [`INLINE_BYTES`] the work is shorter than the pause a runtime
//! thread may take between two awaits, so it runs in place.

/// Tensors of fewer bytes than this are encoded and restored on the
/// runtime thread itself. On a batch-norm ResNet, whose compressed tensors
/// run up to 144 KiB, a tensor took 70–96 µs to encode and 43–60 µs to
/// restore on average (`tlc_encode_seconds`, `tlc_decode_seconds`): below
/// 64 KiB the work is well under a tenth of a millisecond.
pub const INLINE_BYTES: usize = 64 * 1024;

/// Runs `work`, the codec work of a tensor of `bytes`, in place when it is
/// small and through `block_in_place` otherwise. `block_in_place` needs
/// the multi-threaded runtime, which tlcd always runs.
pub fn run<T>(bytes: usize, work: impl FnOnce() -> T) -> T {
    if bytes < INLINE_BYTES {
        work()
    } else {
        tokio::task::block_in_place(work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_work_runs_in_place_even_without_a_multi_threaded_runtime() {
        // block_in_place panics on a current-thread runtime: a small
        // tensor's work must not go there.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answer = runtime.block_on(async { run(INLINE_BYTES - 1, || 42) });
        assert_eq!(answer, 42);
    }

    #[test]
    fn large_work_goes_through_block_in_place() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let outcome =
            std::panic::catch_unwind(|| runtime.block_on(async { run(INLINE_BYTES, || 42) }));
        assert!(
            outcome.is_err(),
            "block_in_place refuses a current-thread runtime"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(async { run(INLINE_BYTES, || 7) }), 7);
    }
}
