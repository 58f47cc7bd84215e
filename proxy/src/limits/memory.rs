//! How much memory tlcd may use, and how it is shared out.
//!
//! A sidecar lives inside a container whose memory limit the kernel
//! enforces by killing it; bounds set far above that limit are no bounds.
//! So the default total is read from the container's cgroup (v2
//! `memory.max`, or v1 `memory.limit_in_bytes`), and every table's default
//! budget is a share of it. Without a cgroup limit (a process on a host),
//! the total is [`UNLIMITED_FALLBACK`]: a figure, not a measurement, chosen
//! to be safe on any training host; set `limits.memory_mib` to change it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The total assumed when no cgroup limit is found: 4 GiB.
pub const UNLIMITED_FALLBACK: u64 = 4 << 30;

/// Values at or above this in cgroup v1 mean "no limit" (the kernel writes
/// a page-rounded `i64::MAX`).
const V1_UNLIMITED: u64 = 1 << 60;

/// Which of the three ways set the total tlcd sizes its bounds from; the
/// `source` label of `tlc_memory_limit_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A cgroup's limit file (see [`detect`]).
    Cgroup,
    /// `limits.memory_mib`, which takes the place of whatever the cgroup says.
    Config,
    /// Neither: [`UNLIMITED_FALLBACK`].
    Fallback,
}

impl Origin {
    /// The label value: `cgroup`, `config` or `fallback`.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Cgroup => "cgroup",
            Origin::Config => "config",
            Origin::Fallback => "fallback",
        }
    }
}

/// The total in force and where it came from: small and `Copy`, to travel
/// with the bounds made from it (a [`MemoryLimit`] keeps the cgroup file's
/// path for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Total {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure came from.
    pub origin: Origin,
}

/// Where the detected total came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A cgroup's limit file.
    Cgroup(PathBuf),
    /// No limit found: [`UNLIMITED_FALLBACK`].
    Fallback,
}

/// The memory tlcd may use in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure came from.
    pub source: Source,
}

impl MemoryLimit {
    /// The figure and its origin, without the path.
    pub fn total(&self) -> Total {
        let origin = match self.source {
            Source::Cgroup(_) => Origin::Cgroup,
            Source::Fallback => Origin::Fallback,
        };
        Total {
            bytes: self.bytes,
            origin,
        }
    }
}

impl std::fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Cgroup(path) => {
                write!(f, "{} MiB (from {})", self.bytes >> 20, path.display())
            }
            Source::Fallback => write!(
                f,
                "{} MiB (no cgroup memory limit found; the built-in assumption)",
                self.bytes >> 20
            ),
        }
    }
}

/// The container's limit, read once per process.
pub fn detected() -> &'static MemoryLimit {
    static DETECTED: OnceLock<MemoryLimit> = OnceLock::new();
    DETECTED.get_or_init(|| detect(Path::new("/")))
}

/// Reads the limit of the cgroup this process is in, under `root` (`/`,
/// or a test's directory). The smallest limit found wins: a v2 limit and a
/// v1 limit never both apply, but a nested path's may be tighter than the
/// namespace root's.
pub fn detect(root: &Path) -> MemoryLimit {
    let own = std::fs::read_to_string(root.join("proc/self/cgroup")).unwrap_or_default();
    let mut candidates = vec![
        root.join("sys/fs/cgroup/memory.max"),
        root.join("sys/fs/cgroup/memory/memory.limit_in_bytes"),
    ];
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = match (fields.next(), fields.next(), fields.next()) {
            (Some(id), Some(c), Some(p)) => (id, c, p.trim_start_matches('/')),
            _ => continue,
        };
        if controllers.is_empty() {
            candidates.push(root.join("sys/fs/cgroup").join(path).join("memory.max"));
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(
                root.join("sys/fs/cgroup/memory")
                    .join(path)
                    .join("memory.limit_in_bytes"),
            );
        }
    }
    candidates
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            parse_limit(&text).map(|bytes| (bytes, path))
        })
        .min_by_key(|(bytes, _)| *bytes)
        .map(|(bytes, path)| MemoryLimit {
            bytes,
            source: Source::Cgroup(path),
        })
        .unwrap_or(MemoryLimit {
            bytes: UNLIMITED_FALLBACK,
            source: Source::Fallback,
        })
}

/// A limit file's value; `None` for "no limit" (`max`, or v1's huge value).
fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>()
        .ok()
        .filter(|&bytes| bytes > 0 && bytes < V1_UNLIMITED)
}

/// How a total is shared out. What is left (a tenth) is the process's own:
/// code, stacks, allocator slack, the graph index, metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    /// Each of the three context tables (push contexts, pull sources,
    /// replicas): a fifth.
    pub table_bytes: u64,
    /// Original responses kept for fallbacks: a twentieth.
    pub fallback_bytes: u64,
    /// Calls in flight (see [`super::budget`]): a quarter.
    pub in_flight_bytes: u64,
}

impl Shares {
    /// The shares of `total` bytes.
    pub fn of(total: u64) -> Shares {
        Shares {
            table_bytes: total / 5,
            fallback_bytes: total / 20,
            in_flight_bytes: total / 4,
        }
    }
}

/// Hands memory the allocator keeps after frees back to the kernel.
///
/// glibc's malloc keeps freed heap memory for reuse, and after large frees
/// it raises its mmap threshold, so that dropped contexts (megabytes each)
/// can leave gigabytes resident with nothing in them; a sidecar judged by
/// its container's memory limit must give it back. Called after evictions
/// that freed a lot; a no-op elsewhere than glibc.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks;
    // it takes no pointer and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Arenas glibc's allocator may keep at most: see [`limit_arenas`].
pub const MALLOC_ARENAS: i32 = 2;

/// Limits glibc's allocator to [`MALLOC_ARENAS`] arenas. Call it first
/// in `main`, before any thread starts: threads that already own an arena
/// keep it. Returns whether the C library took the setting (`false` where
/// it is not glibc).
///
/// glibc gives a thread that allocates while another holds an arena an
/// arena of its own (up to eight per core), and keeps what a thread frees
/// in that thread's arena for its next allocation there. The proxy's
/// runtime threads take turns with each call's buffers (a tensor's answer,
/// a few MB, read on one thread and freed on another), so each arena ends
/// up holding a few of them: through a 200-step MLP job the parameter
/// task's tlcd held 120 to 160 MB resident for about 5 MB of state, each
/// worker's 65 to 85 MB for 7 MB. With two arenas they held 66, 40 and
/// 42 MB, at the same forwarding cost (`deploy/bench/proxies.sh`: 0.59
/// against 0.61 CPU-seconds per GB, 15 µs per small call either way).
pub fn limit_arenas() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two integers and only sets a tunable of
        // glibc's allocator under its own lock; M_ARENA_MAX accepts any
        // positive value. No pointer crosses the call.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_arena_limit() {
        assert!(limit_arenas());
    }

    fn fake_root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn reads_cgroup_v2_and_v1_limits() {
        let v2 = fake_root(&[
            ("proc/self/cgroup", "0::/kubepods/pod1/tlc\n"),
            ("sys/fs/cgroup/memory.max", "max\n"),
            ("sys/fs/cgroup/kubepods/pod1/tlc/memory.max", "268435456\n"),
        ]);
        let limit = detect(v2.path());
        assert_eq!(limit.bytes, 256 << 20);
        assert!(matches!(limit.source, Source::Cgroup(ref p) if p.ends_with("tlc/memory.max")));
        assert_eq!(
            limit.total(),
            Total {
                bytes: 256 << 20,
                origin: Origin::Cgroup
            }
        );
        assert_eq!(limit.total().origin.name(), "cgroup");

        let v1 = fake_root(&[
            (
                "proc/self/cgroup",
                "4:memory:/docker/abc\n3:cpu:/docker/abc\n",
            ),
            (
                "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "536870912\n",
            ),
        ]);
        assert_eq!(detect(v1.path()).bytes, 512 << 20);
    }

    #[test]
    fn no_limit_means_the_documented_fallback() {
        let unlimited = fake_root(&[
            ("proc/self/cgroup", "4:memory:/x\n"),
            (
                "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            ("sys/fs/cgroup/memory.max", "max\n"),
        ]);
        let limit = detect(unlimited.path());
        assert_eq!(limit.bytes, UNLIMITED_FALLBACK);
        assert_eq!(limit.source, Source::Fallback);
        assert_eq!(limit.total().origin.name(), "fallback");
        let nothing = tempfile::tempdir().unwrap();
        assert_eq!(detect(nothing.path()).source, Source::Fallback);
        assert_eq!(parse_limit("garbage"), None);
        assert_eq!(parse_limit("0"), None);
    }

    fn rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            << 10
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_goes_back_to_the_kernel() {
        // Freeing a 16 MiB mmapped block raises glibc's mmap threshold to
        // 16 MiB, so the 1 MiB buffers below come from the heap; the small
        // ones between them stay, so the freed space is not at the heap's
        // top, where glibc would trim it by itself. Contexts dropped among
        // live ones look like this.
        drop(vec![1u8; 16 << 20]);
        let mut pins = Vec::new();
        let mut buffers = Vec::new();
        for i in 0..256 {
            buffers.push(vec![i as u8; 1 << 20]);
            pins.push(vec![i as u8; 64]);
        }
        let full = rss();
        drop(buffers);
        let kept = rss();
        release_freed_memory();
        let released = rss();
        eprintln!(
            "RSS {} MiB full, {} MiB after free, {} MiB after release",
            full >> 20,
            kept >> 20,
            released >> 20
        );
        assert!(
            released + (128 << 20) < full,
            "at least half of 256 MiB returned"
        );
        drop(pins);
    }

    #[test]
    fn shares_leave_a_tenth_to_the_process() {
        let total = 1000 << 20;
        let s = Shares::of(total);
        let used = 3 * s.table_bytes + s.fallback_bytes + s.in_flight_bytes;
        assert!(used <= total * 9 / 10, "{used} of {total}");
    }
}
