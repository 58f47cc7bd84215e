//! The `[policy.link]` table: whether a tensor is compressed only where
//! that pays on its link (measured by the sidecar's `link` module).
//!
//! ```toml
//! [policy.link]
//! mode = "always"        # "always": wherever the policy says; "auto": only where it pays
//! margin = 3             # pass raw only when the link is 3x faster than break-even
//! assume_rate_mbit = 0   # 0: measure each link; else take every link to run at this rate
//! ```
//!
//! Compressing a tensor costs its encode on the holder and its decode on
//! the requester, and saves the time its bytes would take on the link. On
//! a fast link (same host, same zone) the codec's time is more than the
//! transfer it saves, and a sidecar that compresses there makes the job
//! slower than no sidecar at all. In `auto` a requester's tensors cross as
//! TensorFlow wrote them while its link is clearly faster than their
//! break-even rate, and are compressed again as soon as it is not (the
//! sidecar's link module decides them together, so a job's calls are all
//! compressed or all raw).
//!
//! `always` is the default. At the current refinement bounds, runs of the
//! MLP in network-namespace pods at 1 Gbit/s that switched between raw
//! and compressed calls end as accurate as runs that compress every call
//! (docs/LIMITS.md); what keeps `auto` from being the default is its
//! speed on fast links, where forwarding raw bytes through two sidecars
//! costs CPU its break-even rate does not count (docs/COMPRESSION.md,
//! "Fast links").

use serde::{Deserialize, Serialize};

use tlc_core::{bounds, ConfigError};

/// When the policy's codecs apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    /// Compress only where the link is slow enough for that to pay:
    /// measured per link, from each tensor's cost and saving.
    Auto,
    /// Compress whatever the link: every tensor the policy compresses.
    #[default]
    Always,
}

impl LinkMode {
    /// Its name in the configuration and the admin API.
    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Auto => "auto",
            LinkMode::Always => "always",
        }
    }
}

/// The `[policy.link]` table as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkSettings {
    /// `auto` or `always`.
    pub mode: LinkMode,
    /// A tensor passes raw only while the link's rate is above this many
    /// times its break-even rate, and is compressed again once the rate is
    /// below break-even: the gap keeps a tensor from flapping on a link
    /// whose rate wanders near it.
    pub margin: u32,
    /// Take every link to run at this many Mbit/s instead of measuring it
    /// (0: measure). For an operator who knows the links, and for tests.
    pub assume_rate_mbit: u64,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            mode: LinkMode::Always,
            margin: 3,
            assume_rate_mbit: 0,
        }
    }
}

/// The validated `[policy.link]` table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// `auto` or `always`.
    pub mode: LinkMode,
    /// See [`LinkSettings::margin`].
    pub margin: f64,
    /// An assumed rate in bytes per second, if the operator set one.
    pub assumed_rate: Option<f64>,
}

impl Link {
    /// Validates `settings`, naming the key of a bad value.
    pub fn new(settings: &LinkSettings) -> Result<Link, ConfigError> {
        bounds::LINK_MARGIN.check("policy.link.margin", u64::from(settings.margin))?;
        bounds::ASSUME_RATE_MBIT
            .check("policy.link.assume_rate_mbit", settings.assume_rate_mbit)?;
        let assumed_rate =
            (settings.assume_rate_mbit > 0).then(|| settings.assume_rate_mbit as f64 * 1e6 / 8.0);
        Ok(Link {
            mode: settings.mode,
            margin: f64::from(settings.margin),
            assumed_rate,
        })
    }

    /// Whether the link decides at all (`auto`).
    pub fn adaptive(&self) -> bool {
        self.mode == LinkMode::Auto
    }
}

impl Default for Link {
    fn default() -> Self {
        Link {
            mode: LinkMode::Always,
            margin: 3.0,
            assumed_rate: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_rates_converted() {
        let link = Link::new(&LinkSettings::default()).unwrap();
        assert_eq!(link, Link::default());
        assert!(!link.adaptive(), "always is the default");
        let known = LinkSettings {
            assume_rate_mbit: 80,
            ..LinkSettings::default()
        };
        assert_eq!(Link::new(&known).unwrap().assumed_rate, Some(10e6));
        for margin in [0, 101] {
            let bad = LinkSettings {
                margin,
                ..LinkSettings::default()
            };
            let err = Link::new(&bad).unwrap_err().to_string();
            assert!(err.contains("policy.link.margin"), "{err}");
        }
        let parsed: LinkSettings = toml::from_str("mode = \"auto\"").unwrap();
        assert_eq!(parsed.mode, LinkMode::Auto);
        assert!(Link::new(&parsed).unwrap().adaptive());
        assert!(toml::from_str::<LinkSettings>("mode = \"sometimes\"").is_err());
    }
}
