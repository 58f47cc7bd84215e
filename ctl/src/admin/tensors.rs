//! `tlcctl tensors`: the tensor contexts of every sidecar, from
//! `GET /v1/tensors`, merged into one table.

use anyhow::Result;
use clap::{Args, ValueEnum};
use tlc_admin_api::{TensorRow, Tensors, TensorsQuery};

use super::client::Method;
use super::format::{self as fmt, NONE};
use super::output::{self, Read};
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

/// The fields `/v1/tensors` sorts by (`tlc_admin_api::SortField`, with
/// help for the command line).
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

impl From<SortField> for tlc_admin_api::SortField {
    fn from(field: SortField) -> Self {
        use tlc_admin_api::SortField as Api;
        match field {
            SortField::Tensor => Api::Tensor,
            SortField::RawBytes => Api::RawBytes,
            SortField::WireBytes => Api::WireBytes,
            SortField::Ratio => Api::Ratio,
            SortField::Frames => Api::Frames,
            SortField::Elements => Api::Elements,
            SortField::IdleSeconds => Api::IdleSeconds,
        }
    }
}

impl TensorsArgs {
    /// The query these arguments ask for.
    pub fn query(&self) -> TensorsQuery {
        TensorsQuery {
            sort: self.sort.map(Into::into),
            limit: self.limit,
        }
    }
}

/// Runs `tensors`.
pub fn run(ctx: &Ctx, args: &TensorsArgs) -> Result<()> {
    let outcomes = ctx.call_all(Method::Get, &args.query().path(), None);
    output::show(&outcomes, ctx.format, |answers| {
        render(answers, args, ctx.targets.len() > 1)
    })
}

/// The rows of every target that answered, as one table; with a TARGET
/// column when there are several.
pub fn render(answers: &[Read<'_, Tensors>], args: &TensorsArgs, several: bool) -> String {
    let mut rows: Vec<(&str, &TensorRow)> = answers
        .iter()
        .flat_map(|(target, body)| {
            let rows = body.iter().flat_map(|body| &body.tensors);
            rows.map(move |row| (*target, row))
        })
        .collect();
    // Each target sorted and limited its own rows; merged, they need the
    // same order again, and the first N of the union are the global first N.
    if several {
        let field = args.query().sort.unwrap_or_default();
        rows.sort_by(|a, b| field.compare(a.1, b.1));
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
            "LINK",
            "REGIME",
        ],
        &[
            "AGREE", "S", "ELEMENTS", "FRAMES", "RAW", "WIRE", "RATIO", "LAST M", "ERR NORM",
            "PEAK", "REPLICA",
        ],
    );
    let columns = [columns, table::columns(&["WHY"], &[])].concat();
    let rows = rows
        .into_iter()
        .map(|(target, row)| (target, row_cells(row)))
        .collect();
    output::target_table(&columns, rows, several)
}

fn row_cells(row: &TensorRow) -> Vec<String> {
    vec![
        row.direction.clone(),
        row.side.clone(),
        fmt::truncate_middle(&row.tensor, TENSOR_WIDTH),
        fmt::optional(row.class.as_deref()),
        fmt::optional(row.treatment.as_deref()),
        fmt::optional(row.peer.as_deref()),
        row.codec.codec.clone(),
        fmt::optional(row.link.as_deref()),
        fmt::optional(row.regime.as_deref()),
        row.agreement
            .map_or_else(|| NONE.to_string(), |a| format!("{a:.2}")),
        row.codec
            .sparsity
            .map_or_else(|| NONE.to_string(), |s| format!("{s:.2}")),
        row.elements.to_string(),
        row.frames.to_string(),
        fmt::byte_count(row.raw_bytes),
        fmt::byte_count(row.wire_bytes),
        fmt::ratio(row.ratio),
        fmt::significant_or_none(row.last_scale),
        fmt::significant_or_none(row.error_norm),
        fmt::significant_or_none(row.peak_norm),
        fmt::optional(row.replica_version),
        fmt::optional(row.reason.as_deref()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn sort_names_are_the_apis() {
        for field in SortField::value_variants() {
            let name = field.to_possible_value().map(|v| v.get_name().to_string());
            let api = tlc_admin_api::SortField::from(*field);
            assert_eq!(name.as_deref(), Some(api.name()));
        }
        assert_eq!(
            SortField::value_variants().len(),
            tlc_admin_api::SortField::ALL.len()
        );
    }

    #[test]
    fn query() {
        let args = |sort, limit| TensorsArgs { sort, limit };
        assert_eq!(args(None, None).query().path(), "/v1/tensors");
        assert_eq!(
            args(Some(SortField::RawBytes), Some(5)).query().path(),
            "/v1/tensors?sort=raw_bytes&limit=5"
        );
    }
}
