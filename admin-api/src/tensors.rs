//! The per-tensor listing (`GET /v1/tensors?sort=FIELD&limit=N`): its
//! rows, its query, and the order rows are sorted in.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::paths;
use crate::policy::CodecView;

/// The answer of `GET /v1/tensors`. `R` is [`TensorRow`]; a reader that
/// passes rows on as tlcd sent them reads `Tensors<serde_json::Value>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensors<R = TensorRow> {
    /// One row per tensor context, and on the holder side one per tensor
    /// answered without one; sorted and cut as the query asked.
    pub tensors: Vec<R>,
}

/// One tensor context (or one tensor answered without a context) and what
/// went through it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorRow {
    /// `push` (gradients) or `pull` (model values).
    pub direction: String,
    /// `holder` (this sidecar encodes) or `requester` (it decodes pulls and
    /// keeps a replica).
    pub side: String,
    /// The tensor's node name.
    pub tensor: String,
    /// Holder side: `dense_read`, `dense_gradient`, `sparse` or `unknown`.
    pub class: Option<String>,
    /// Holder side: the op that decided the class.
    pub reason: Option<String>,
    /// `error_feedback`, `replica`, `stateless` or `passed`.
    pub treatment: Option<String>,
    /// The task the tensor is sent to (push contexts, holder rows without
    /// a context), or the holder (replicas).
    pub peer: Option<String>,
    /// The codec of the last frame (its fields are the row's).
    #[serde(flatten)]
    pub codec: CodecView,
    /// Values per tensor, 0 before the first.
    pub elements: u64,
    /// Frames encoded (holder) or envelopes applied (requester).
    pub frames: u64,
    /// The tensors' size as f32.
    pub raw_bytes: u64,
    /// Their size on the wire.
    pub wire_bytes: u64,
    /// `raw_bytes / wire_bytes`, 0 before the first frame.
    pub ratio: f64,
    /// The M of the last frame, where the codec has one.
    pub last_scale: Option<f64>,
    /// The L2 norm of the error buffer (push contexts).
    pub error_norm: Option<f64>,
    /// Push contexts under a peak-lag bound (`push_max_lag`): the L2 norm
    /// of the gradient peak the error buffer is bounded against (the
    /// largest so far, or with `peak_half_life` the recent largest). The
    /// buffer's lag is `error_norm / peak_norm`.
    #[serde(default)]
    pub peak_norm: Option<f64>,
    /// Push contexts under the fidelity controller: `critical` (the next
    /// gradient is held to the critical lag bound) or `calm`.
    #[serde(default)]
    pub regime: Option<String>,
    /// Push contexts under the fidelity controller: gradients encoded
    /// while critical.
    #[serde(default)]
    pub critical_pushes: Option<u64>,
    /// Push contexts whose fidelity controller asks for it
    /// (`[policy.refine.critical] agreement`): what the requester last said
    /// of how much the workers' gradients agree (the whole gradient it
    /// collects, of which this tensor is part), -1 to 1; `null` before it
    /// said anything.
    #[serde(default)]
    pub agreement: Option<f64>,
    /// The replica's version (pull sources and replicas).
    pub replica_version: Option<u64>,
    /// Seconds since the context was last used.
    pub idle_seconds: f64,
    /// Memory the context holds.
    pub memory_bytes: u64,
    /// Holder side, for a tensor compressed at least once: `compress`,
    /// `pass` (crossing raw: its link is faster than compressing), or
    /// `pass:N/M` (raw to N of its M requesters).
    #[serde(default)]
    pub link: Option<String>,
    /// The link's rate at the last decision, bytes per second.
    #[serde(default)]
    pub link_rate: Option<f64>,
    /// The rate below which compressing its requester's tensors (of its
    /// direction) together pays, bytes per second.
    #[serde(default)]
    pub break_even_rate: Option<f64>,
}

impl TensorRow {
    /// A row for `tensor` with nothing measured yet: every count 0, every
    /// optional field `null`. The sidecar fills in what its context knows.
    pub fn new(direction: &str, side: &str, tensor: String, codec: CodecView) -> TensorRow {
        TensorRow {
            direction: direction.to_string(),
            side: side.to_string(),
            tensor,
            class: None,
            reason: None,
            treatment: None,
            peer: None,
            codec,
            elements: 0,
            frames: 0,
            raw_bytes: 0,
            wire_bytes: 0,
            ratio: 0.0,
            last_scale: None,
            error_norm: None,
            peak_norm: None,
            regime: None,
            critical_pushes: None,
            agreement: None,
            replica_version: None,
            idle_seconds: 0.0,
            memory_bytes: 0,
            link: None,
            link_rate: None,
            break_even_rate: None,
        }
    }
}

/// The fields rows sort by (`sort=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortField {
    /// The tensor's name, ascending.
    Tensor,
    /// Bytes before compression, largest first.
    RawBytes,
    /// Bytes sent, largest first (the default).
    #[default]
    WireBytes,
    /// Raw over wire bytes, largest first.
    Ratio,
    /// Frames, most first.
    Frames,
    /// Values per tensor, most first.
    Elements,
    /// Time since last use, longest first.
    IdleSeconds,
}

impl SortField {
    /// Every field, in the order errors list them.
    pub const ALL: [SortField; 7] = [
        SortField::Tensor,
        SortField::RawBytes,
        SortField::WireBytes,
        SortField::Ratio,
        SortField::Frames,
        SortField::Elements,
        SortField::IdleSeconds,
    ];

    /// The name in the query, which is also the row's field.
    pub fn name(self) -> &'static str {
        match self {
            SortField::Tensor => "tensor",
            SortField::RawBytes => "raw_bytes",
            SortField::WireBytes => "wire_bytes",
            SortField::Ratio => "ratio",
            SortField::Frames => "frames",
            SortField::Elements => "elements",
            SortField::IdleSeconds => "idle_seconds",
        }
    }

    /// The field called `name`.
    pub fn from_name(name: &str) -> Option<SortField> {
        SortField::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The order tlcd lists rows in: names ascending (then the direction),
    /// numbers descending (then the name).
    pub fn compare(self, a: &TensorRow, b: &TensorRow) -> Ordering {
        if self == SortField::Tensor {
            return a.tensor.cmp(&b.tensor).then(a.direction.cmp(&b.direction));
        }
        let key = |r: &TensorRow| -> f64 {
            match self {
                SortField::RawBytes => r.raw_bytes as f64,
                SortField::Ratio => r.ratio,
                SortField::Frames => r.frames as f64,
                SortField::Elements => r.elements as f64,
                SortField::IdleSeconds => r.idle_seconds,
                SortField::WireBytes | SortField::Tensor => r.wire_bytes as f64,
            }
        };
        key(b).total_cmp(&key(a)).then(a.tensor.cmp(&b.tensor))
    }
}

/// The query of `GET /v1/tensors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TensorsQuery {
    /// `sort=`: the order of the rows (tlcd's default: `wire_bytes`).
    pub sort: Option<SortField>,
    /// `limit=`: at most this many rows, the first in that order.
    pub limit: Option<u64>,
}

/// Why a `/v1/tensors` query is refused (`400`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QueryError {
    /// `sort=` names no field.
    #[error("sort={0}: one of {names}", names = SortField::ALL.map(SortField::name).join(", "))]
    Sort(String),
    /// `limit=` is not a number.
    #[error("limit={0}: a number of rows")]
    Limit(String),
    /// A parameter this endpoint does not take.
    #[error("unknown query parameter '{0}' (sort, limit)")]
    Unknown(String),
}

impl TensorsQuery {
    /// Reads the query part of a request (`sort=ratio&limit=5`, without the
    /// `?`); a parameter given twice counts as its last.
    pub fn parse(query: &str) -> Result<TensorsQuery, QueryError> {
        let mut parsed = TensorsQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "sort" => {
                    let field = SortField::from_name(value)
                        .ok_or_else(|| QueryError::Sort(value.to_string()))?;
                    parsed.sort = Some(field);
                }
                "limit" => {
                    let limit = value
                        .parse()
                        .map_err(|_| QueryError::Limit(value.to_string()))?;
                    parsed.limit = Some(limit);
                }
                other => return Err(QueryError::Unknown(other.to_string())),
            }
        }
        Ok(parsed)
    }

    /// The path to request: `/v1/tensors`, with `?sort=...&limit=...` for
    /// what is set.
    pub fn path(&self) -> String {
        let mut query = Vec::new();
        if let Some(sort) = self.sort {
            query.push(format!("sort={}", sort.name()));
        }
        if let Some(limit) = self.limit {
            query.push(format!("limit={limit}"));
        }
        if query.is_empty() {
            paths::TENSORS.to_string()
        } else {
            format!("{}?{}", paths::TENSORS, query.join("&"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tensor: &str, direction: &str, wire_bytes: u64) -> TensorRow {
        let codec = CodecView {
            codec: "3lc".into(),
            sparsity: Some(1.0),
            k: None,
        };
        TensorRow {
            wire_bytes,
            ..TensorRow::new(direction, "holder", tensor.into(), codec)
        }
    }

    #[test]
    fn queries_parse_and_print_back() {
        let query = TensorsQuery::parse("sort=ratio&limit=5").unwrap_or_default();
        assert_eq!(
            query,
            TensorsQuery {
                sort: Some(SortField::Ratio),
                limit: Some(5)
            }
        );
        assert_eq!(query.path(), "/v1/tensors?sort=ratio&limit=5");
        assert_eq!(TensorsQuery::default().path(), "/v1/tensors");
        assert_eq!(TensorsQuery::parse(""), Ok(TensorsQuery::default()));
    }

    #[test]
    fn bad_queries_say_what_is_allowed() {
        let message = |q| TensorsQuery::parse(q).err().map(|e| e.to_string());
        assert_eq!(
            message("sort=size").as_deref(),
            Some(
                "sort=size: one of tensor, raw_bytes, wire_bytes, ratio, frames, elements, \
                 idle_seconds"
            )
        );
        assert_eq!(
            message("limit=all").as_deref(),
            Some("limit=all: a number of rows")
        );
        assert_eq!(
            message("order=asc").as_deref(),
            Some("unknown query parameter 'order' (sort, limit)")
        );
    }

    #[test]
    fn names_ascending_numbers_descending() {
        let mut rows = [
            row("b", "push", 10),
            row("a", "pull", 10),
            row("c", "push", 30),
        ];
        rows.sort_by(|x, y| SortField::WireBytes.compare(x, y));
        let names: Vec<&str> = rows.iter().map(|r| r.tensor.as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
        let mut rows = [
            row("t", "push", 1),
            row("t", "pull", 2),
            row("s", "push", 3),
        ];
        rows.sort_by(|x, y| SortField::Tensor.compare(x, y));
        let keys: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.tensor.as_str(), r.direction.as_str()))
            .collect();
        assert_eq!(keys, [("s", "push"), ("t", "pull"), ("t", "push")]);
    }
}
