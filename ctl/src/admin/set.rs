//! `tlcctl set`: the common policy changes, sent as `POST /v1/policy`.
//!
//! Only syntax is checked here (a number is a number); ranges and codec
//! rules are the daemon's, so its message is the one the operator sees and
//! the rules live in one place.

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Number;
use tlc_admin_api::{paths, Directions, PolicyChanged, PolicyRequest};

use super::client::Method;
use super::output;
use super::Ctx;

/// The `set` subcommands.
#[derive(Debug, Subcommand)]
pub enum SetCommand {
    /// Set 3lc's sparsity multiplier s (tlcd accepts 1 <= s < 2).
    #[command(allow_negative_numbers = true)]
    Sparsity {
        /// The multiplier.
        #[arg(value_name = "S", value_parser = parse_number)]
        sparsity: Number,
        #[command(flatten)]
        scope: Scope,
    },
    /// Switch codec (3lc, topk, fp16, ...), optionally with its parameter.
    #[command(allow_negative_numbers = true)]
    Codec {
        /// The codec's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// 3lc's sparsity multiplier.
        #[arg(long, value_name = "S", value_parser = parse_number)]
        sparsity: Option<Number>,
        /// topk's share of values kept, in percent.
        #[arg(long, value_name = "K", value_parser = parse_number)]
        k: Option<Number>,
        #[command(flatten)]
        scope: Scope,
    },
    /// Set the size under which tensors pass uncompressed, both directions.
    #[command(after_help = "\
BYTES is a whole number of bytes, optionally with a unit: 65536, 64KiB,
1MiB, 1.5GiB (binary: Ki, KiB, Mi, MiB, Gi, GiB) or 64kB, 1MB (decimal: k,
kB, M, MB, G, GB).")]
    Threshold {
        /// The threshold.
        #[arg(value_name = "BYTES", value_parser = parse_bytes)]
        bytes: u64,
    },
    /// Send the tensors matching a glob uncompressed.
    Skip {
        /// A glob over tensor names, e.g. '*embedding*'.
        #[arg(long, value_name = "PATTERN", required = true)]
        tensor: String,
        /// The direction the override applies to (tlcd's default: both).
        #[arg(long, value_enum, value_name = "DIRECTION")]
        direction: Option<Direction>,
    },
}

/// Which tensors and direction a change applies to.
#[derive(Debug, Args)]
pub struct Scope {
    /// Put an override for the tensors matching this glob first, instead of
    /// changing the direction's defaults.
    #[arg(long, value_name = "PATTERN")]
    tensor: Option<String>,
    /// The direction to change (tlcd's default: both).
    #[arg(long, value_enum, value_name = "DIRECTION")]
    direction: Option<Direction>,
}

/// `--direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Direction {
    /// Gradients workers send.
    Push,
    /// Parameters workers fetch.
    Pull,
    /// Both.
    Both,
}

impl From<Direction> for Directions {
    fn from(direction: Direction) -> Directions {
        match direction {
            Direction::Push => Directions::Push,
            Direction::Pull => Directions::Pull,
            Direction::Both => Directions::Both,
        }
    }
}

/// Runs a `set` subcommand.
pub fn run(ctx: &Ctx, command: SetCommand) -> Result<()> {
    let body = serde_json::to_value(request(command))?;
    let outcomes = ctx.call_all(Method::Post, paths::POLICY, Some(&body));
    output::report_change(&outcomes, ctx.format, changed)
}

/// The `/v1/policy` body; a field the operator left out is left out, so
/// the daemon's default applies.
fn request(command: SetCommand) -> PolicyRequest {
    let scoped = |tensor: Option<String>, direction: Option<Direction>| PolicyRequest {
        tensor,
        direction: direction.map(Directions::from),
        ..PolicyRequest::default()
    };
    match command {
        SetCommand::Sparsity { sparsity, scope } => PolicyRequest {
            sparsity: Some(sparsity),
            ..scoped(scope.tensor, scope.direction)
        },
        SetCommand::Codec {
            name,
            sparsity,
            k,
            scope,
        } => PolicyRequest {
            codec: Some(name),
            sparsity,
            k,
            ..scoped(scope.tensor, scope.direction)
        },
        SetCommand::Threshold { bytes } => PolicyRequest {
            min_bytes: Some(bytes),
            ..PolicyRequest::default()
        },
        SetCommand::Skip { tensor, direction } => PolicyRequest {
            skip: Some(true),
            ..scoped(Some(tensor), direction)
        },
    }
}

/// `changed a, b` from the daemon's answer.
fn changed(answer: Option<&PolicyChanged>) -> String {
    match answer {
        None => String::new(),
        Some(answer) if answer.changed.is_empty() => "nothing changed".to_string(),
        Some(answer) => format!("changed {}", answer.changed.join(", ")),
    }
}

/// A finite number, kept as written where JSON can say it (`5` stays an
/// integer, `1.75` a float) so the daemon sees what the operator typed.
fn parse_number(text: &str) -> Result<Number, String> {
    let text = text.trim();
    if let Ok(number) = serde_json::from_str::<Number>(text) {
        return Ok(number);
    }
    // Forms JSON lacks but people type: `.5`, `+1.5`, `2.`.
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .ok_or_else(|| format!("{text:?} is not a number"))
}

/// `65536`, `64KiB`, `1.5MiB`, `64kB` as a whole number of bytes.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "ki" | "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mi" | "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gi" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {:?} (use B, KiB, MiB, GiB, kB, MB or GB)",
                unit.trim()
            ))
        }
    };
    if digits.is_empty() {
        return Err(format!("{text:?} is not a number of bytes"));
    }
    if let Ok(whole) = digits.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| format!("{text:?} is too large"));
    }
    let value: f64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number of bytes"))?;
    let bytes = value * multiplier as f64;
    if bytes.fract() != 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The body as sent: through a `Value`, keys sorted.
    fn body(command: SetCommand) -> Value {
        serde_json::to_value(request(command)).unwrap_or_default()
    }

    #[test]
    fn bodies() {
        let scope = |tensor: Option<&str>, direction| Scope {
            tensor: tensor.map(str::to_string),
            direction,
        };
        let sparsity = |text| parse_number(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            body(SetCommand::Sparsity {
                sparsity: sparsity("1.75"),
                scope: scope(Some("*dense*"), Some(Direction::Push)),
            }),
            json!({"sparsity": 1.75, "tensor": "*dense*", "direction": "push"})
        );
        assert_eq!(
            body(SetCommand::Codec {
                name: "topk".into(),
                sparsity: None,
                k: Some(sparsity("5")),
                scope: scope(None, None),
            })
            .to_string(),
            r#"{"codec":"topk","k":5}"#
        );
        assert_eq!(
            body(SetCommand::Threshold { bytes: 65536 }),
            json!({"min_bytes": 65536})
        );
        assert_eq!(
            body(SetCommand::Skip {
                tensor: "*emb*".into(),
                direction: None
            }),
            json!({"skip": true, "tensor": "*emb*"})
        );
    }

    #[test]
    fn numbers() {
        let shown = |t| parse_number(t).map(|n| n.to_string());
        assert_eq!(shown("1.75"), Ok("1.75".into()));
        assert_eq!(shown("5"), Ok("5".into()));
        assert_eq!(shown(".5"), Ok("0.5".into()));
        assert_eq!(shown("2.5"), Ok("2.5".into()));
        assert!(shown("abc").is_err());
        assert!(shown("NaN").is_err());
        assert!(shown("inf").is_err());
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("64 kib"), Ok(65536));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_bytes("64kB"), Ok(64_000));
        assert_eq!(parse_bytes("2Gi"), Ok(2 << 30));
        for bad in [
            "",
            "KiB",
            "1.3B",
            "12XB",
            "-1",
            "99999999999999999999GiB",
            "1.2.3",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
