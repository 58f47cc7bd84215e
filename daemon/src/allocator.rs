//! The C library's allocator, told to keep fewer arenas.
//!
//! glibc gives a thread that allocates while another holds an arena an
//! arena of its own (up to eight per core), and keeps what a thread frees
//! in that thread's arena for its next allocation there. tlcd's runtime
//! threads take turns with each call's buffers (a tensor's answer, a few
//! MB, read on one thread and freed on another), so each arena ends up
//! holding a few of them: through a 200-step MLP job the parameter task's
//! tlcd held 120 to 160 MB resident for about 5 MB of state, each
//! worker's 65 to 85 MB for 7 MB. With two arenas they held 66, 40 and
//! 42 MB, at the same forwarding cost (`deploy/bench/proxies.sh`: 0.59
//! against 0.61 CPU-seconds per GB, 15 µs per small call either way;
//! README, "Memory").

// The one foreign call of the daemon crate.
#![allow(unsafe_code)]

/// Arenas glibc may keep at most.
pub const ARENAS: i32 = 2;

/// Limits glibc's allocator to [`ARENAS`] arenas. Call it first in
/// `main`, before any thread starts: threads that already own an arena
/// keep it. Returns whether the C library took the setting (`false` where
/// it is not glibc).
pub fn limit_arenas() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two integers and only sets a tunable of
        // glibc's allocator under its own lock; M_ARENA_MAX accepts any
        // positive value. No pointer crosses the call.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENAS) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_arena_limit() {
        assert!(super::limit_arenas());
    }
}
