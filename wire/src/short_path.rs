//! Short paths for TensorFlow's methods between two sidecars.
//!
//! HTTP/2's header compression (HPACK) makes a header that repeats cost a
//! byte, but the `h2` crate never adds `:path` to its table (it treats the
//! path like a credential), so every call carries its path spelled out:
//! 28 bytes for `/tensorflow.WorkerService/RecvTensor`, on a call whose
//! request message is a few dozen bytes once hop-compressed. Between two
//! sidecars a method known to both crosses as `/~N` instead, `N` its index
//! in [`METHODS`] (4 bytes), and the holder's sidecar puts the full path
//! back before anything reads it.
//!
//! A holder's sidecar that restores short paths says so on its answers
//! (`tlc-hop-paths: 1`, in the `peer` module); a requester's sidecar sends short paths
//! only to one that said so. The table only grows at its end: an index
//! never names another method.

/// TensorFlow's methods that may cross as a short path, by index. Append
/// only.
pub const METHODS: [&str; 40] = [
    "/tensorflow.WorkerService/GetStatus",
    "/tensorflow.WorkerService/CreateWorkerSession",
    "/tensorflow.WorkerService/DeleteWorkerSession",
    "/tensorflow.WorkerService/RegisterGraph",
    "/tensorflow.WorkerService/DeregisterGraph",
    "/tensorflow.WorkerService/RunGraph",
    "/tensorflow.WorkerService/CleanupGraph",
    "/tensorflow.WorkerService/CleanupAll",
    "/tensorflow.WorkerService/RecvTensor",
    "/tensorflow.WorkerService/RecvBuf",
    "/tensorflow.WorkerService/Logging",
    "/tensorflow.WorkerService/Tracing",
    "/tensorflow.WorkerService/GetStepSequence",
    "/tensorflow.WorkerService/CompleteGroup",
    "/tensorflow.WorkerService/CompleteInstance",
    "/tensorflow.WorkerService/MarkRecvFinished",
    "/tensorflow.eager.EagerService/CreateContext",
    "/tensorflow.eager.EagerService/UpdateContext",
    "/tensorflow.eager.EagerService/Enqueue",
    "/tensorflow.eager.EagerService/StreamingEnqueue",
    "/tensorflow.eager.EagerService/WaitQueueDone",
    "/tensorflow.eager.EagerService/RunComponentFunction",
    "/tensorflow.eager.EagerService/KeepAlive",
    "/tensorflow.eager.EagerService/CloseContext",
    "/tensorflow.CoordinationService/RegisterTask",
    "/tensorflow.CoordinationService/Heartbeat",
    "/tensorflow.CoordinationService/WaitForAllTasks",
    "/tensorflow.CoordinationService/ShutdownTask",
    "/tensorflow.CoordinationService/ResetTask",
    "/tensorflow.CoordinationService/ReportErrorToTask",
    "/tensorflow.CoordinationService/ReportErrorToService",
    "/tensorflow.CoordinationService/GetTaskState",
    "/tensorflow.CoordinationService/InsertKeyValue",
    "/tensorflow.CoordinationService/GetKeyValue",
    "/tensorflow.CoordinationService/TryGetKeyValue",
    "/tensorflow.CoordinationService/GetKeyValueDir",
    "/tensorflow.CoordinationService/DeleteKeyValue",
    "/tensorflow.CoordinationService/Barrier",
    "/tensorflow.CoordinationService/CancelBarrier",
    "/tensorflow.CoordinationService/PollForError",
];

/// What every short path starts with; no gRPC method path does (those
/// are `/package.Service/Method`).
pub const PREFIX: &str = "/~";

/// The short paths, as [`METHODS`] is indexed.
const SHORT: [&str; METHODS.len()] = [
    "/~0", "/~1", "/~2", "/~3", "/~4", "/~5", "/~6", "/~7", "/~8", "/~9", "/~10", "/~11", "/~12",
    "/~13", "/~14", "/~15", "/~16", "/~17", "/~18", "/~19", "/~20", "/~21", "/~22", "/~23", "/~24",
    "/~25", "/~26", "/~27", "/~28", "/~29", "/~30", "/~31", "/~32", "/~33", "/~34", "/~35", "/~36",
    "/~37", "/~38", "/~39",
];

/// The short path of `path`, if it is one of [`METHODS`].
pub fn shorten(path: &str) -> Option<&'static str> {
    METHODS
        .iter()
        .position(|m| *m == path)
        .map(|index| SHORT[index])
}

/// What a path received from a sidecar stands for: `Ok(None)` for a path
/// that is not short (it stands for itself), the method for a known short
/// path, `Err` for a short path this build does not know (a newer sidecar's
/// method, or junk).
pub fn expand(path: &str) -> Result<Option<&'static str>, UnknownShortPath> {
    if !path.starts_with(PREFIX) {
        return Ok(None);
    }
    SHORT
        .iter()
        .position(|s| *s == path)
        .map(|index| Some(METHODS[index]))
        .ok_or(UnknownShortPath)
}

/// A short path outside this build's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown short method path")]
pub struct UnknownShortPath;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_and_short_paths_are_short() {
        for method in METHODS {
            let short = shorten(method).unwrap();
            assert!(short.len() <= 4, "{short}");
            assert_eq!(expand(short), Ok(Some(method)));
        }
        for (index, short) in SHORT.iter().enumerate() {
            assert_eq!(*short, format!("{PREFIX}{index}"));
        }
    }

    #[test]
    fn other_paths_stand_for_themselves_and_unknown_short_ones_are_refused() {
        assert_eq!(shorten("/tlc.Sidecar/Fallback"), None);
        assert_eq!(shorten("/tensorflow.WorkerService/recvtensor"), None);
        assert_eq!(expand("/tensorflow.WorkerService/RecvTensor"), Ok(None));
        assert_eq!(expand("/"), Ok(None));
        for junk in [
            "/~",
            "/~40",
            "/~08",
            "/~-1",
            "/~8/",
            "/~ 8",
            "/~99999999999999999999",
        ] {
            assert_eq!(expand(junk), Err(UnknownShortPath), "{junk}");
        }
    }
}
