//! `tlcctl tensors`: the tensor contexts of every sidecar, from
//! `GET /v1/tensors`, merged into one table.

use std::cmp::Ordering;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::client::{Method, Outcome};
use super::format::{self as fmt, NONE};
use super::output;
use super::Ctx;
use crate::table;

/// The longest tensor name a table shows before cutting out its middle.
const TENSOR_WIDTH: usize = 48;

/// Arguments of `tensors` (and the table part of `top`).
#[derive(Debug, Clone, Args)]
pub struct TensorsArgs {
    /// Order rows by this field: names ascending, numbers descending
    /// (tlcd's default: wire_bytes).
    #[arg(long, value_enum, value_name = "FIELD")]
    pub sort: Option<SortField>,
    /// Show at most N rows (the N first in sort order across all targets).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// The fields `/v1/tensors` sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortField {
    /// The tensor's name.
    #[value(name = "tensor")]
    Tensor,
    /// Bytes before compression.
    #[value(name = "raw_bytes")]
    RawBytes,
    /// Bytes sent.
    #[value(name = "wire_bytes")]
    WireBytes,
    /// Raw over wire bytes.
    #[value(name = "ratio")]
    Ratio,
    /// Frames encoded or decoded.
    #[value(name = "frames")]
    Frames,
    /// Values per tensor.
    #[value(name = "elements")]
    Elements,
    /// Time since the context was last used.
    #[value(name = "idle_seconds")]
    IdleSeconds,
}

impl SortField {
    /// The name in the API, which is also the row's field.
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
}

/// Runs `tensors`.
pub fn run(ctx: &Ctx, args: &TensorsArgs) -> Result<()> {
    let outcomes = ctx.call_all(Method::Get, &path(args), None);
    output::show(&outcomes, ctx.format, |outcomes| {
        render(outcomes, args, ctx.targets.len() > 1)
    })
}

/// `/v1/tensors` with the query `args` ask for.
pub fn path(args: &TensorsArgs) -> String {
    let mut query = Vec::new();
    if let Some(sort) = args.sort {
        query.push(format!("sort={}", sort.name()));
    }
    if let Some(limit) = args.limit {
        query.push(format!("limit={limit}"));
    }
    if query.is_empty() {
        "/v1/tensors".to_string()
    } else {
        format!("/v1/tensors?{}", query.join("&"))
    }
}

/// The rows of every target that answered, as one table; with a TARGET
/// column when there are several.
pub fn render(outcomes: &[Outcome], args: &TensorsArgs, several: bool) -> String {
    let mut rows: Vec<(&str, &Value)> = output::answers(outcomes)
        .flat_map(|(target, body)| {
            let tensors = body.get("tensors").and_then(Value::as_array);
            tensors.into_iter().flatten().map(move |row| (target, row))
        })
        .collect();
    // Each target sorted and limited its own rows; merged, they need the
    // same order again, and the first N of the union are the global first N.
    if several {
        let field = args.sort.unwrap_or(SortField::WireBytes);
        rows.sort_by(|a, b| compare(field, a.1, b.1));
        if let Some(limit) = args.limit {
            rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
    }
    let columns = table::columns(
        &[
            "DIRECTION",
            "SIDE",
            "TENSOR",
            "CLASS",
            "TREATMENT",
            "PEER",
            "CODEC",
        ],
        &[
            "S", "ELEMENTS", "FRAMES", "RAW", "WIRE", "RATIO", "LAST M", "ERR NORM", "REPLICA",
        ],
    );
    let columns = [columns, table::columns(&["WHY"], &[])].concat();
    let rows = rows
        .into_iter()
        .map(|(target, row)| (target, row_cells(row)))
        .collect();
    output::target_table(&columns, rows, several)
}

fn row_cells(row: &Value) -> Vec<String> {
    vec![
        fmt::cell(row, "/direction"),
        fmt::cell(row, "/side"),
        fmt::truncate_middle(&fmt::cell(row, "/tensor"), TENSOR_WIDTH),
        fmt::cell(row, "/class"),
        fmt::cell(row, "/treatment"),
        fmt::cell(row, "/peer"),
        fmt::cell(row, "/codec"),
        fmt::number(row, "/sparsity").map_or_else(|| NONE.to_string(), |s| format!("{s:.2}")),
        fmt::count(row, "/elements"),
        fmt::count(row, "/frames"),
        fmt::bytes_at(row, "/raw_bytes"),
        fmt::bytes_at(row, "/wire_bytes"),
        fmt::ratio(row, ""),
        fmt::significant_at(row, "/last_scale"),
        fmt::significant_at(row, "/error_norm"),
        fmt::cell(row, "/replica_version"),
        fmt::cell(row, "/reason"),
    ]
}

/// The daemon's order: names ascending, numbers descending, rows missing
/// the field last.
fn compare(field: SortField, a: &Value, b: &Value) -> Ordering {
    let key = field.name();
    if field == SortField::Tensor {
        let name = |row: &Value| row.get(key).and_then(Value::as_str).map(str::to_string);
        return match (name(a), name(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (x, y) => x.is_none().cmp(&y.is_none()),
        };
    }
    let number = |row: &Value| row.get(key).and_then(Value::as_f64);
    match (number(a), number(b)) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (x, y) => x.is_none().cmp(&y.is_none()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order() {
        let rows = [
            json!({"tensor": "b", "wire_bytes": 10}),
            json!({"tensor": "a"}),
            json!({"wire_bytes": 20}),
            json!({"tensor": "c", "wire_bytes": 30}),
        ];
        let sorted = |field| {
            let mut r: Vec<&Value> = rows.iter().collect();
            r.sort_by(|a, b| compare(field, a, b));
            r.iter()
                .map(|v| v["tensor"].as_str().unwrap_or("?"))
                .collect::<String>()
        };
        assert_eq!(sorted(SortField::WireBytes), "c?ba");
        assert_eq!(sorted(SortField::Tensor), "abc?");
    }

    #[test]
    fn query() {
        let args = |sort, limit| TensorsArgs { sort, limit };
        assert_eq!(path(&args(None, None)), "/v1/tensors");
        assert_eq!(
            path(&args(Some(SortField::RawBytes), Some(5))),
            "/v1/tensors?sort=raw_bytes&limit=5"
        );
    }
}
