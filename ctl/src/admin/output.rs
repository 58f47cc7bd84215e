//! The shapes every admin command prints in: the JSON envelope, one line
//! per target for changes, and per-target failure lines.
//!
//! `-o json` passes every answer on as tlcd sent it. Tables and change
//! lines read the answers as the `tlc_admin_api` types; an answer that is
//! not in that shape (a tlcd of another version) blanks its cells with a
//! warning on stderr instead of failing the command.

use std::fmt;
use std::io::{self, Write};

use anyhow::Result;
use clap::ValueEnum;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::client::Outcome;
use crate::table::{self, Align};

/// `-o/--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON: admin commands print `{"results": [...]}`, one entry per
    /// target; inject prints the manifests.
    Json,
    /// YAML: `tlcctl inject` only (its default).
    Yaml,
}

/// The error `run` returns once every target's failure has been printed:
/// `main` exits 1 without adding a line of its own.
#[derive(Debug)]
pub struct Failed;

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("at least one tlcd admin target failed")
    }
}

impl std::error::Error for Failed {}

/// One entry of the JSON envelope; field order as documented.
#[derive(Serialize)]
struct Entry<'a> {
    target: &'a str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// The JSON envelope, the same shape for one target or many so a script
/// reads `.results[]` either way.
#[derive(Serialize)]
pub struct Envelope<'a> {
    results: Vec<Entry<'a>>,
}

/// The envelope of `outcomes`.
pub fn envelope(outcomes: &[Outcome]) -> Envelope<'_> {
    let results: Vec<Entry<'_>> = outcomes
        .iter()
        .map(|outcome| match &outcome.answer {
            Ok(response) => Entry {
                target: outcome.target.label(),
                ok: true,
                response: Some(response),
                error: None,
            },
            Err(error) => Entry {
                target: outcome.target.label(),
                ok: false,
                response: None,
                error: Some(error),
            },
        })
        .collect();
    Envelope { results }
}

/// Prints the envelope, indented, to stdout; then [`finish`].
fn print_json(outcomes: &[Outcome]) -> Result<()> {
    // Serialised first: an io::Error inside serde_json's error would hide
    // a closed pipe (`| head`) from main, which prints nothing for one.
    let mut text = serde_json::to_string_pretty(&envelope(outcomes))?;
    text.push('\n');
    print(&text)?;
    finish(outcomes)
}

/// Prints `TARGET: error: MESSAGE` on stderr for every failed target.
pub fn print_failures(outcomes: &[Outcome]) {
    for outcome in outcomes {
        if let Err(message) = &outcome.answer {
            eprintln!("{}: error: {message}", outcome.target);
        }
    }
}

/// One target's answer read as `T`, or why it is not in `T`'s shape.
pub fn read<T: DeserializeOwned>(body: &Value) -> Result<T, String> {
    T::deserialize(body).map_err(|e| e.to_string())
}

/// The line that says `target`'s answer could not be read: `why`.
pub fn unreadable(target: &str, why: &str) -> String {
    format!(
        "{target}: warning: the answer is not in the shape this tlcctl reads ({why}); shown as -"
    )
}

/// A target that answered, and its answer read as `T` (`None` where it is
/// not in that shape).
pub type Read<'a, T> = (&'a str, Option<T>);

/// The targets that answered, each with its answer read as `T`, and a
/// warning line for each answer that could not be.
fn read_all<T: DeserializeOwned>(outcomes: &[Outcome]) -> (Vec<Read<'_, T>>, Vec<String>) {
    let mut warnings = Vec::new();
    let read = outcomes
        .iter()
        .filter_map(|o| Some((o.target.label(), o.answer.as_ref().ok()?)))
        .map(|(target, body)| match read(body) {
            Ok(typed) => (target, Some(typed)),
            Err(why) => {
                warnings.push(unreadable(target, &why));
                (target, None)
            }
        })
        .collect();
    (read, warnings)
}

/// Shows what every target answered to a read: the envelope, or the table
/// `render` makes of the answers read as `T` (nothing when none answered),
/// a line per failure and a warning per answer not in `T`'s shape.
pub fn show<T: DeserializeOwned>(
    outcomes: &[Outcome],
    format: Format,
    render: impl FnOnce(&[Read<'_, T>]) -> String,
) -> Result<()> {
    if format == Format::Json {
        return print_json(outcomes);
    }
    let (read, warnings) = read_all::<T>(outcomes);
    if !read.is_empty() {
        print(&render(&read))?;
    }
    print_failures(outcomes);
    for warning in warnings {
        eprintln!("{warning}");
    }
    finish(outcomes)
}

/// A table of rows from the targets, each row with its target: in a TARGET
/// column first when there are several targets, left out for one.
pub fn target_table(
    columns: &[(&str, Align)],
    rows: Vec<(&str, Vec<String>)>,
    several: bool,
) -> String {
    if !several {
        let cells: Vec<Vec<String>> = rows.into_iter().map(|(_, row)| row).collect();
        return table::render(columns, &cells);
    }
    let mut all = vec![("TARGET", Align::Left)];
    all.extend_from_slice(columns);
    let cells: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(target, row)| std::iter::once(target.to_string()).chain(row).collect())
        .collect();
    table::render(&all, &cells)
}

/// `Err(Failed)` if any target failed, for the exit code.
pub fn finish(outcomes: &[Outcome]) -> Result<()> {
    if outcomes.iter().any(|o| o.answer.is_err()) {
        Err(Failed.into())
    } else {
        Ok(())
    }
}

/// Reports a change made on every target: the envelope, or one line per
/// target (`HOST:PORT: ok (what changed)` on stdout, `HOST:PORT: error:
/// why` on stderr), in the targets' order. `describe` says what changed
/// from the answer read as `T` (`None` if it is not in that shape: then a
/// warning follows the line).
pub fn report_change<T: DeserializeOwned>(
    outcomes: &[Outcome],
    format: Format,
    describe: impl Fn(Option<&T>) -> String,
) -> Result<()> {
    if format == Format::Json {
        return print_json(outcomes);
    }
    let mut out = io::stdout().lock();
    for outcome in outcomes {
        match &outcome.answer {
            Ok(response) => {
                let read = read::<T>(response);
                let what = describe(read.as_ref().ok());
                if what.is_empty() {
                    writeln!(out, "{}: ok", outcome.target)?;
                } else {
                    writeln!(out, "{}: ok ({what})", outcome.target)?;
                }
                if let Err(why) = &read {
                    out.flush()?;
                    eprintln!("{}", unreadable(outcome.target.label(), why));
                }
            }
            Err(message) => {
                // Flushed first so a terminal shows the lines in target order.
                out.flush()?;
                eprintln!("{}: error: {message}", outcome.target);
            }
        }
    }
    out.flush()?;
    finish(outcomes)
}

/// Writes `text` to stdout.
pub fn print(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::target;

    #[test]
    fn envelope_shape() {
        let outcomes = vec![
            Outcome {
                target: target::parse("a:1").unwrap_or_else(|e| panic!("{e}")),
                answer: Ok(serde_json::json!({"filter": "info"})),
            },
            Outcome {
                target: target::parse("b:2").unwrap_or_else(|e| panic!("{e}")),
                answer: Err("cannot reach".to_string()),
            },
        ];
        let text = serde_json::to_string(&envelope(&outcomes)).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"results":[{"target":"a:1","ok":true,"response":{"filter":"info"}},{"target":"b:2","ok":false,"error":"cannot reach"}]}"#
        );
    }
}
