//! Changing the log filter of a running tlcd.

use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

use crate::config::log_filter;

type Setter = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// The log filter in force, and the means to replace it.
pub struct LogControl {
    current: Mutex<String>,
    set: Setter,
}

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogControl")
            .field("current", &self.filter())
            .finish()
    }
}

impl LogControl {
    /// `filter` is in force now; `set` installs a new one (a
    /// `tracing_subscriber::reload::Handle` in tlcd, anything in tests).
    pub fn new(
        filter: &str,
        set: impl Fn(EnvFilter) -> Result<(), String> + Send + Sync + 'static,
    ) -> LogControl {
        LogControl {
            current: Mutex::new(filter.to_string()),
            set: Box::new(set),
        }
    }

    /// A control that changes nothing but remembers the filter (tests,
    /// embedding without a subscriber).
    pub fn detached(filter: &str) -> LogControl {
        LogControl::new(filter, |_| Ok(()))
    }

    /// The filter in force.
    pub fn filter(&self) -> String {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `filter` in force; on error the old one stays.
    pub fn set(&self, filter: &str) -> Result<(), String> {
        let parsed = log_filter::parse(filter)?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if *current != filter {
            (self.set)(parsed)?;
            *current = filter.to_string();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn bad_filters_change_nothing() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let log = LogControl::new("info", move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert!(log.set("info,tlc_daemon=[").is_err());
        assert!(log.set("verbose").is_err());
        assert_eq!(log.filter(), "info");
        log.set("debug").unwrap();
        assert_eq!(log.filter(), "debug");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
