//! The admin API's endpoints: the paths tlcd routes and tlcctl requests.

/// `GET`: `200 ok` (text) while the process serves; no token needed.
pub const HEALTHZ: &str = "/healthz";

/// `GET`: `Ready`; no token needed.
pub const READYZ: &str = "/readyz";

/// `GET`: `Status`.
pub const STATUS: &str = "/v1/status";

/// `GET`: `ConfigView`; `PATCH` with a `ConfigPatch`:
/// the new `ConfigView`.
pub const CONFIG: &str = "/v1/config";

/// `POST` with a `PolicyRequest`: `PolicyChanged`.
pub const POLICY: &str = "/v1/policy";

/// `POST` without a body: re-read the config file; `ConfigView`.
pub const RELOAD: &str = "/v1/reload";

/// `GET`, with the query of `TensorsQuery`: `Tensors`.
pub const TENSORS: &str = "/v1/tensors";

/// `GET`: `LogLevel`; `PUT` with a `SetLogLevel`: the
/// new `LogLevel`.
pub const LOG_LEVEL: &str = "/v1/log-level";

/// Every endpoint: a request to one of them with another method is `405`,
/// to any other path `404`.
pub const ENDPOINTS: [&str; 8] = [
    HEALTHZ, READYZ, STATUS, CONFIG, POLICY, RELOAD, TENSORS, LOG_LEVEL,
];
