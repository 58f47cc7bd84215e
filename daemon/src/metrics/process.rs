//! The sidecar process itself, under the names of Prometheus' standard
//! process collector (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), so dashboards and alerts written
//! for any other exporter work on tlcd too. These are the only series
//! without the `tlc_` prefix.
//!
//! Read from `/proc/self` when scraped (Linux): `stat` for CPU time,
//! memory, threads and start time, `/proc/stat` for the boot time the
//! start time counts from, `fd` for the descriptors open, and the
//! `RLIMIT_NOFILE` soft limit for the most it may open. A file that cannot
//! be read leaves out only the series it gives; a scrape never fails on it.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// What `/proc/self/stat` says about the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// CPU time in user mode, in clock ticks.
    pub user_ticks: u64,
    /// CPU time in kernel mode, in clock ticks.
    pub system_ticks: u64,
    /// Threads in the process.
    pub threads: u64,
    /// When the process started, in clock ticks after boot.
    pub start_ticks: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Resident set size, in pages.
    pub resident_pages: u64,
}

/// Reads the fields of [`Stat`] from the text of `/proc/<pid>/stat`, or
/// `None` if it does not have them.
///
/// The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // Index 0 is field 3 (state): field n is at index n - 3.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        user_ticks: field(14)?,
        system_ticks: field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time (Unix seconds) from the text of `/proc/stat`, its
/// `btime` line.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// File descriptors the process has open now (the entries of
/// `/proc/self/fd`, the one this count itself opens included, as
/// Prometheus' own collector counts).
fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    let count = entries.filter(Result::is_ok).count();
    u64::try_from(count).ok()
}

/// The soft limit on open file descriptors, `None` when unlimited.
fn max_fds() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

fn int_gauge(value: u64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
    gauge
}

fn float_gauge(value: f64) -> Gauge<f64, AtomicU64> {
    let gauge = Gauge::<f64, AtomicU64>::default();
    gauge.set(value);
    gauge
}

/// Registers the `process_*` series of this process, read now, in
/// `registry`, which must have no prefix for the names to be the
/// standard ones.
pub fn register(registry: &mut Registry) {
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    let stat = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(parse_stat);
    if let Some(stat) = stat {
        let cpu = Counter::<f64, AtomicU64>::default();
        cpu.inc_by((stat.user_ticks + stat.system_ticks) as f64 / ticks);
        registry.register_with_unit(
            "process_cpu",
            "Total user and system CPU time spent, in seconds",
            Unit::Seconds,
            cpu,
        );
        let page = u64::try_from(rustix::param::page_size()).unwrap_or(4096);
        registry.register_with_unit(
            "process_resident_memory",
            "Resident memory size, in bytes",
            Unit::Bytes,
            int_gauge(stat.resident_pages.saturating_mul(page)),
        );
        registry.register_with_unit(
            "process_virtual_memory",
            "Virtual memory size, in bytes",
            Unit::Bytes,
            int_gauge(stat.virtual_bytes),
        );
        registry.register(
            "process_threads",
            "Number of OS threads in the process",
            int_gauge(stat.threads),
        );
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .as_deref()
            .and_then(parse_boot_time);
        if let Some(boot) = boot {
            registry.register_with_unit(
                "process_start_time",
                "Start time of the process since the Unix epoch, in seconds",
                Unit::Seconds,
                float_gauge(boot as f64 + stat.start_ticks as f64 / ticks),
            );
        }
    }
    if let Some(open) = open_fds() {
        registry.register(
            "process_open_fds",
            "Number of open file descriptors",
            int_gauge(open),
        );
    }
    if let Some(max) = max_fds() {
        registry.register(
            "process_max_fds",
            "Maximum number of open file descriptors (the soft limit)",
            int_gauge(max),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use prometheus_client::registry::Registry;

    use super::*;

    /// The value of every sample line of an unlabelled exposition.
    fn values() -> HashMap<String, f64> {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.split_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn stat_with_a_name_that_has_spaces_and_parentheses() {
        let text = "4242 (tl cd) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    150 50 0 0 20 0 7 0 12345 104857600 2560 18446744073709551615";
        let stat = parse_stat(text).unwrap();
        assert_eq!(
            stat,
            Stat {
                user_ticks: 150,
                system_ticks: 50,
                threads: 7,
                start_ticks: 12345,
                virtual_bytes: 104_857_600,
                resident_pages: 2560,
            }
        );
        assert_eq!(parse_stat("4242 (tlcd) S 1 2"), None);
        assert_eq!(
            parse_boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn values_are_sane() {
        let before = values();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
            "process_threads",
        ] {
            assert!(before.contains_key(name), "{name} in {before:?}");
        }
        assert!(before["process_resident_memory_bytes"] > 0.0);
        assert!(before["process_virtual_memory_bytes"] >= before["process_resident_memory_bytes"]);
        assert!(before["process_open_fds"] >= 3.0, "{before:?}");
        assert!(before["process_max_fds"] >= before["process_open_fds"]);
        assert!(before["process_threads"] >= 1.0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = before["process_start_time_seconds"];
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start {start}, now {now}"
        );

        // Busy for a while: the CPU time must grow (by at least a tick).
        let busy = Instant::now();
        let mut x = 0u64;
        while busy.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = values();
        assert!(
            after["process_cpu_seconds_total"] > before["process_cpu_seconds_total"],
            "{} then {}",
            before["process_cpu_seconds_total"],
            after["process_cpu_seconds_total"]
        );
    }

    #[test]
    fn rendered_without_the_prefix_before_the_one_eof() {
        let text = crate::metrics::render(&tlc_sidecar::sidecar::Sidecar::default()).unwrap();
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
        assert!(text.contains("\nprocess_open_fds "), "{text}");
        assert!(!text.contains("tlc_process"), "{text}");
        assert!(text.contains("\ntlc_build_info{"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
