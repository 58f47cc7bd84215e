//! The error every setting reports: the key at fault, the bad value and
//! what is allowed. Each crate validates its own settings with it, and the
//! daemon's configuration layers add the read, parse and merge cases.

use thiserror::Error;

/// A configuration that cannot be used, with the key at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the TOML parser said, with line and key.
        message: String,
    },
    /// The layers do not merge into this schema (environment or flags).
    #[error("configuration: {message}")]
    Merge {
        /// What the merge said, with the key.
        message: String,
    },
    /// A value is out of its allowed range.
    #[error("{key} = {value}: {allowed}")]
    Invalid {
        /// The key, as written in the file.
        key: String,
        /// The offending value.
        value: String,
        /// What is allowed.
        allowed: String,
    },
}
