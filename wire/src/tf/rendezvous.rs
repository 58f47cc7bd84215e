//! Rendezvous keys: how a `RecvTensorRequest` names the tensor it wants.
//!
//! TensorFlow builds the key in `Rendezvous::CreateKey`
//! (`tensorflow/core/framework/rendezvous.cc`) as
//!
//! ```text
//! src_device;src_incarnation_hex;dst_device;tensor_name;frame_id:iter_id
//! /job:ps/replica:0/task:0/device:CPU:0;0000000000000001;/job:worker/replica:0/task:1/device:CPU:0;edge_12_w1/read;0:0
//! ```
//!
//! Current TF writes the incarnation as 16 zero-padded hex digits
//! (`absl::Hex(.., kZeroPad16)`); `Rendezvous::ParseKey` reads any hex string
//! that fits a `u64`, and so does [`RendezvousKey::parse`].
//!
//! `tensor_name` comes from graph partitioning
//! (`tensorflow/core/graph/graph_partition.cc`, `SetSendRecvAttrs`):
//! `edge_<edge id>_<source node name>`. The edge id belongs to one worker's
//! graph, so the same variable has different ids on different workers;
//! [`context_name`] drops it.

use std::fmt;

/// Why a string is not a rendezvous key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not five `;`-separated parts.
    #[error("rendezvous key has {found} ';'-separated parts; expected 5")]
    PartCount {
        /// Parts found.
        found: usize,
    },
    /// A part that must not be empty is empty.
    #[error("rendezvous key has an empty {0}")]
    EmptyPart(&'static str),
    /// The incarnation is not a hex `u64`.
    #[error("rendezvous key incarnation {0:?} is not a 64-bit hex number")]
    Incarnation(String),
    /// The last part is not `frame_id:iter_id`.
    #[error("rendezvous key frame and iteration {0:?} is not of the form frame_id:iter_id")]
    FrameIter(String),
}

/// The frame and iteration of a tensor: `0:0` outside control-flow loops.
///
/// TF's `FrameAndIter` holds a `uint64` frame id and an `int64` iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FrameIter {
    /// Frame id (a hash of the frame name inside `tf.while_loop`s).
    pub frame_id: u64,
    /// Iteration within the frame.
    pub iter_id: i64,
}

/// A parsed rendezvous key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RendezvousKey {
    /// Device that produces the tensor (the task answering `RecvTensor`).
    pub src_device: String,
    /// Incarnation of the source device; changes when that task restarts.
    pub src_incarnation: u64,
    /// Device that consumes the tensor (the task calling `RecvTensor`).
    pub dst_device: String,
    /// The tensor's name in the partitioned graph, e.g. `edge_12_w1/read`.
    pub tensor_name: String,
    /// Frame and iteration.
    pub frame_iter: FrameIter,
}

impl RendezvousKey {
    /// Parses a key as `Rendezvous::ParseKey` does: exactly five parts, a
    /// non-empty tensor name, a hex incarnation. Device names are kept as
    /// they are; see [`TaskName::of_device`] to read them.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let parts: Vec<&str> = key.split(';').collect();
        let [src_device, incarnation, dst_device, tensor_name, frame_iter] = parts[..] else {
            return Err(KeyError::PartCount { found: parts.len() });
        };
        if src_device.is_empty() {
            return Err(KeyError::EmptyPart("source device"));
        }
        if dst_device.is_empty() {
            return Err(KeyError::EmptyPart("destination device"));
        }
        if tensor_name.is_empty() {
            return Err(KeyError::EmptyPart("tensor name"));
        }
        Ok(Self {
            src_device: src_device.to_owned(),
            src_incarnation: parse_hex_u64(incarnation)
                .ok_or_else(|| KeyError::Incarnation(incarnation.to_owned()))?,
            dst_device: dst_device.to_owned(),
            tensor_name: tensor_name.to_owned(),
            frame_iter: parse_frame_iter(frame_iter)
                .ok_or_else(|| KeyError::FrameIter(frame_iter.to_owned()))?,
        })
    }

    /// The task holding the tensor, if the source device names one.
    pub fn src_task(&self) -> Option<TaskName> {
        TaskName::of_device(&self.src_device)
    }

    /// The task asking for the tensor, if the destination device names one.
    pub fn dst_task(&self) -> Option<TaskName> {
        TaskName::of_device(&self.dst_device)
    }

    /// The name under which tlc keeps this tensor's context; see
    /// [`context_name`].
    pub fn context_name(&self) -> &str {
        context_name(&self.tensor_name)
    }
}

impl fmt::Display for RendezvousKey {
    /// Writes the key back the way current TF writes it (16 hex digits).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{};{:016x};{};{};{}:{}",
            self.src_device,
            self.src_incarnation,
            self.dst_device,
            self.tensor_name,
            self.frame_iter.frame_id,
            self.frame_iter.iter_id
        )
    }
}

/// Hex digits only (no sign, no `0x`), any case, at least one, value fitting
/// a `u64`: what TF's `HexStringToUint64` accepts.
fn parse_hex_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn parse_frame_iter(s: &str) -> Option<FrameIter> {
    let (frame, iter) = s.split_once(':')?;
    if !is_decimal(frame) || !is_decimal(iter.strip_prefix('-').unwrap_or(iter)) {
        return None;
    }
    Some(FrameIter {
        frame_id: frame.parse().ok()?,
        iter_id: iter.parse().ok()?,
    })
}

fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A task of the cluster: job, replica and task index, as in
/// `/job:ps/replica:0/task:0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName {
    /// Job name, e.g. `ps`, `worker`, `chief`, `localhost`.
    pub job: String,
    /// Replica index (0 in between-graph training).
    pub replica: u32,
    /// Task index within the job.
    pub task: u32,
}

impl TaskName {
    /// The task of a fully specified device name such as
    /// `/job:ps/replica:0/task:0/device:CPU:0` or the legacy
    /// `/job:worker/replica:0/task:1/cpu:0`.
    ///
    /// Returns `None` unless the name has a job, a replica and a task, each
    /// exactly once and without wildcards; the device part is not checked.
    pub fn of_device(device: &str) -> Option<Self> {
        let rest = device.strip_prefix('/')?;
        let (mut job, mut replica, mut task) = (None, None, None);
        for segment in rest.split('/') {
            if let Some(name) = segment.strip_prefix("job:") {
                if job.is_some() || !is_job_name(name) {
                    return None;
                }
                job = Some(name);
            } else if let Some(n) = segment.strip_prefix("replica:") {
                if replica.is_some() {
                    return None;
                }
                replica = Some(parse_index(n)?);
            } else if let Some(n) = segment.strip_prefix("task:") {
                if task.is_some() {
                    return None;
                }
                task = Some(parse_index(n)?);
            }
            // `device:CPU:0`, `cpu:0`, `gpu:1`: the device within the task.
        }
        Some(Self {
            job: job?.to_owned(),
            replica: replica?,
            task: task?,
        })
    }

    /// The task's name as a device-name prefix: `/job:ps/replica:0/task:0`.
    pub fn prefix(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/job:{}/replica:{}/task:{}",
            self.job, self.replica, self.task
        )
    }
}

/// TF's job names: a letter, then letters, digits and `_`.
fn is_job_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn parse_index(s: &str) -> Option<u32> {
    if !is_decimal(s) {
        return None;
    }
    s.parse().ok()
}

/// The context name of a tensor: its `tensor_name` without the graph-local
/// `edge_<id>_` prefix, i.e. the name of the node that produces it
/// (`edge_12_w1/read` → `w1/read`). Names not of that form are returned
/// unchanged.
///
/// The node name alone does not say which output of the node is sent: TF's
/// tensor name has no output index, so two outputs of one multi-output node
/// sent to the same task get the same context name. Contexts must therefore
/// still check the shape (and reset on a change).
pub fn context_name(tensor_name: &str) -> &str {
    let Some(rest) = tensor_name.strip_prefix("edge_") else {
        return tensor_name;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return tensor_name;
    }
    match rest[digits..].strip_prefix('_') {
        Some(node) if !node.is_empty() => node,
        _ => tensor_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PULL: &str = "/job:ps/replica:0/task:0/device:CPU:0;0000000000000001;\
                        /job:worker/replica:0/task:1/device:CPU:0;edge_12_w1/read;0:0";

    #[test]
    fn parses_a_pull_key() {
        let k = RendezvousKey::parse(PULL).unwrap();
        assert_eq!(k.src_device, "/job:ps/replica:0/task:0/device:CPU:0");
        assert_eq!(k.src_incarnation, 1);
        assert_eq!(k.dst_device, "/job:worker/replica:0/task:1/device:CPU:0");
        assert_eq!(k.tensor_name, "edge_12_w1/read");
        assert_eq!(
            k.frame_iter,
            FrameIter {
                frame_id: 0,
                iter_id: 0
            }
        );
        assert_eq!(k.context_name(), "w1/read");
        let src = k.src_task().unwrap();
        assert_eq!((src.job.as_str(), src.replica, src.task), ("ps", 0, 0));
        assert_eq!(src.prefix(), "/job:ps/replica:0/task:0");
        assert_eq!(
            k.dst_task().unwrap().prefix(),
            "/job:worker/replica:0/task:1"
        );
        // Written back as TF writes it.
        assert_eq!(k.to_string(), PULL);
    }

    #[test]
    fn parses_a_push_key_with_a_gradient_name_and_big_incarnation() {
        let key = "/job:worker/replica:0/task:1/device:CPU:0;a3f4b2c1d0e9f8a7;\
                   /job:ps/replica:0/task:0/device:CPU:0;\
                   edge_345_gradients/dense_1/MatMul_grad/MatMul_1;0:0";
        let k = RendezvousKey::parse(key).unwrap();
        assert_eq!(k.src_incarnation, 0xa3f4_b2c1_d0e9_f8a7);
        assert_eq!(k.context_name(), "gradients/dense_1/MatMul_grad/MatMul_1");
        assert_eq!(k.src_task().unwrap().job, "worker");
        assert_eq!(k.dst_task().unwrap().job, "ps");
    }

    #[test]
    fn incarnation_padded_or_not_any_case() {
        let key = |inc: &str| {
            format!("/job:ps/replica:0/task:0/device:CPU:0;{inc};/job:worker/replica:0/task:0/device:CPU:0;edge_1_x;0:0")
        };
        for (inc, want) in [
            ("1", 1),
            ("0000000000000001", 1),
            ("00000000000000000000001", 1),
            ("ABCdef", 0xabcdef),
            ("ffffffffffffffff", u64::MAX),
            ("0", 0),
        ] {
            assert_eq!(
                RendezvousKey::parse(&key(inc)).unwrap().src_incarnation,
                want,
                "{inc}"
            );
        }
        for bad in ["", "+1", "0x1", "-1", "1g", "10000000000000000", " 1"] {
            assert_eq!(
                RendezvousKey::parse(&key(bad)),
                Err(KeyError::Incarnation(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn frame_and_iteration() {
        let key = |fi: &str| {
            format!("/job:a/replica:0/task:0/device:CPU:0;1;/job:b/replica:0/task:0/device:CPU:0;n;{fi}")
        };
        let k = RendezvousKey::parse(&key("18446744073709551615:7")).unwrap();
        assert_eq!(k.frame_iter.frame_id, u64::MAX);
        assert_eq!(k.frame_iter.iter_id, 7);
        assert_eq!(
            RendezvousKey::parse(&key("3:-1"))
                .unwrap()
                .frame_iter
                .iter_id,
            -1
        );
        for bad in [
            "",
            "0",
            "0:",
            ":0",
            "a:0",
            "0:0:0",
            "-1:0",
            "0:+1",
            "18446744073709551616:0",
        ] {
            assert_eq!(
                RendezvousKey::parse(&key(bad)),
                Err(KeyError::FrameIter(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn wrong_part_counts_and_empty_parts() {
        assert_eq!(
            RendezvousKey::parse(""),
            Err(KeyError::PartCount { found: 1 })
        );
        assert_eq!(
            RendezvousKey::parse("a;1;b;c"),
            Err(KeyError::PartCount { found: 4 })
        );
        assert_eq!(
            RendezvousKey::parse("a;1;b;c;0:0;"),
            Err(KeyError::PartCount { found: 6 })
        );
        assert_eq!(
            RendezvousKey::parse("a;1;b;;0:0"),
            Err(KeyError::EmptyPart("tensor name"))
        );
        assert_eq!(
            RendezvousKey::parse(";1;b;c;0:0"),
            Err(KeyError::EmptyPart("source device"))
        );
        assert_eq!(
            RendezvousKey::parse("a;1;;c;0:0"),
            Err(KeyError::EmptyPart("destination device"))
        );
    }

    #[test]
    fn odd_device_names() {
        let key = "/job:localhost/replica:0/task:0/device:GPU:1;1;/cpu:0;edge_3_v;0:0";
        let k = RendezvousKey::parse(key).unwrap();
        let t = k.src_task().unwrap();
        assert_eq!(t.prefix(), "/job:localhost/replica:0/task:0");
        // A legacy local name has no task.
        assert_eq!(k.dst_task(), None);

        let of = TaskName::of_device;
        assert_eq!(
            of("/job:worker/replica:0/task:12/cpu:0").unwrap().prefix(),
            "/job:worker/replica:0/task:12"
        );
        assert_eq!(
            of("/job:chief_1/replica:2/task:3").unwrap().prefix(),
            "/job:chief_1/replica:2/task:3"
        );
        // Order as TF's parser allows it.
        assert_eq!(
            of("/task:1/job:ps/replica:0/device:CPU:0")
                .unwrap()
                .prefix(),
            "/job:ps/replica:0/task:1"
        );
        for bad in [
            "",
            "/",
            "job:ps/replica:0/task:0",
            "/job:ps/replica:0",
            "/job:ps/task:0",
            "/job:*/replica:0/task:0",
            "/job:ps/replica:*/task:0",
            "/job:ps/replica:0/task:-1",
            "/job:ps/replica:0/task:99999999999",
            "/job:1ps/replica:0/task:0",
            "/job:/replica:0/task:0",
            "/job:ps/replica:0/task:0/job:ps",
            "/job:ps;x/replica:0/task:0",
        ] {
            assert_eq!(of(bad), None, "{bad}");
        }
    }

    #[test]
    fn context_names() {
        for (name, want) in [
            ("edge_12_w1/read", "w1/read"),
            ("edge_7_w1", "w1"),
            ("edge_0_Variable", "Variable"),
            ("edge_123_edge_4_x", "edge_4_x"),
            (
                "edge_12_dense/kernel/Read/ReadVariableOp",
                "dense/kernel/Read/ReadVariableOp",
            ),
            ("edge_5_", "edge_5_"),
            ("edge_5", "edge_5"),
            ("edge__x", "edge__x"),
            ("edge_x_y", "edge_x_y"),
            ("Edge_1_x", "Edge_1_x"),
            ("w1/read", "w1/read"),
            ("", ""),
            ("edge_١_x", "edge_١_x"),
        ] {
            assert_eq!(context_name(name), want, "{name}");
        }
    }

    #[test]
    fn same_variable_on_two_workers_shares_a_context() {
        let a = RendezvousKey::parse(
            "/job:ps/replica:0/task:0/device:CPU:0;1;/job:worker/replica:0/task:0/device:CPU:0;edge_12_w1/read;0:0",
        )
        .unwrap();
        let b = RendezvousKey::parse(
            "/job:ps/replica:0/task:0/device:CPU:0;1;/job:worker/replica:0/task:1/device:CPU:0;edge_31_w1/read;0:0",
        )
        .unwrap();
        assert_eq!(a.context_name(), b.context_name());
    }

    #[test]
    fn never_panics_on_junk() {
        let samples = [
            ";;;;",
            ";;;;;",
            "a;b;c;d;e",
            "é;1;ü;∑;0:0",
            "\0;0;\0;\0;0:0",
            "/job:;1;/job:;edge_;:",
        ];
        for s in samples {
            let _ = RendezvousKey::parse(s);
            let _ = TaskName::of_device(s);
            let _ = context_name(s);
        }
    }
}
