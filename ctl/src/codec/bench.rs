//! `tlcctl codec bench`: single-thread encode and decode throughput, bits
//! per value, and memcpy of the same data for scale.

use std::hint::black_box;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use tlc_codec::{Codec, Encoder, Feedback, Frame, Limits};

use super::gradient;
use super::rawf32;
use super::spec;
use crate::table::{self, Align};

/// The rows run when no --codec is given.
const DEFAULT_ROWS: [&str; 12] = [
    "none", "fp16", "bf16", "int8", "terngrad", "onebit", "topk25", "topk5", "3lc:1.0", "3lc:1.5",
    "3lc:1.75", "3lc:1.9",
];
/// Untimed encodes through each context before timing starts.
pub const WARMUP_STEPS: usize = 32;
/// Wall time a row runs for when --iterations is not given.
const TARGET: Duration = Duration::from_millis(300);
/// Fewest timed iterations per row when --iterations is not given.
const MIN_ITERATIONS: usize = 3;
/// Most timed iterations per row when --iterations is not given.
const MAX_ITERATIONS: usize = 1_000_000;

/// Arguments of `codec bench`.
#[derive(Debug, Args)]
#[command(after_help = "\
Each codec row feeds a sequence of different tensors (--tensors of them,
round robin) through one encoder, so error feedback is exercised as in
training. Every timed iteration encodes one tensor, then parses and decodes
the frame into a preallocated buffer, then copies the tensor with
copy_from_slice into a preallocated buffer (memcpy), all on one thread after
32 untimed encodes that bring the error buffer to its steady state. Throughputs are GB/s of f32 input (4 bytes per
value, 1 GB = 1e9 bytes) from the MEDIAN time over the timed iterations;
bits/value is the mean payload size (header and checksum not counted).

The default data is gradient-like: the weight gradient of a dense layer over
a mini-batch (ReLU activations with a quarter of units dead, column-scaled
errors, a component shared by all steps), centred on zero, heavy-tailed,
typical magnitude 1e-3, from a fixed seed. With --input the file's first --elements values are the first
tensor, and the others are it with each value scaled by a random factor in
[0.5, 1.5).

Codec rows are NAME[:PARAM]: none, fp16, bf16, int8, terngrad[:SEED],
onebit, topk[:PERCENT], topk5, topk25, 3lc[:SPARSITY] (3lc alone is s=1.0).

Build with --release for meaningful numbers:
  cargo run --release -p tlc-ctl -- codec bench")]
pub struct BenchArgs {
    /// Values per tensor.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 4_194_304,
          value_parser = clap::value_parser!(u64).range(1..))]
    elements: u64,

    /// Read the data from a raw little-endian f32 file (its first N values,
    /// or all of them if it holds fewer) instead of generating it.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,

    /// Timed iterations per codec (default: as many as fit in about 0.3 s,
    /// at least 3).
    #[arg(long, short = 'i', value_name = "I", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,

    /// Number of different tensors fed through each encoder in turn.
    #[arg(long, value_name = "T", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    tensors: u64,

    /// Codecs to run, as NAME[:PARAM] (repeat the flag or separate with
    /// commas); default: all baselines and 3lc at s = 1.0, 1.5, 1.75, 1.9.
    #[arg(long = "codec", value_name = "NAME[:PARAM]", value_delimiter = ',')]
    codecs: Vec<String>,

    /// Print one JSON object per codec and line instead of a table.
    #[arg(long)]
    json: bool,
}

/// The measurements of one codec row.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Codec name.
    pub codec: &'static str,
    /// 3LC sparsity multiplier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f32>,
    /// Top-k share in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<f32>,
    /// Whether the encoder used error feedback.
    pub feedback: bool,
    /// Values per tensor.
    pub elements: usize,
    /// Timed iterations.
    pub iterations: usize,
    /// Encode throughput, GB/s of f32 input (median).
    pub encode_gbps: f64,
    /// Parse and decode throughput, GB/s of f32 output (median).
    pub decode_gbps: f64,
    /// copy_from_slice throughput on the same data (median).
    pub memcpy_gbps: f64,
    /// Mean payload bits per value.
    pub bits_per_value: f64,
    /// Label for the table, e.g. `3lc s=1.75`.
    #[serde(skip)]
    pub label: String,
}

/// Runs `codec bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let names: Vec<&str> = if args.codecs.is_empty() {
        DEFAULT_ROWS.to_vec()
    } else {
        args.codecs.iter().map(String::as_str).collect()
    };
    let codecs = names
        .iter()
        .map(|name| spec::parse_row(name))
        .collect::<Result<Vec<Codec>>>()?;
    let (data, source) = load_data(args)?;
    let n = data.first().map_or(0, Vec::len);
    if cfg!(debug_assertions) {
        eprintln!(
            "tlcctl: warning: this is a debug build; numbers are not meaningful \
             (use cargo run --release -p tlc-ctl -- codec bench)"
        );
    }

    let stdout = io::stdout();
    let mut out = stdout.lock();
    if !args.json {
        writeln!(
            out,
            "{n} values per tensor, {} tensors of {source}, one thread, median of timed iterations",
            data.len()
        )
        .context("cannot write to stdout")?;
    }
    let mut rows = Vec::new();
    for codec in codecs {
        let row = bench_row(codec, &data, args.iterations)
            .with_context(|| format!("benchmark of {}", spec::label(&codec)))?;
        if args.json {
            let line = serde_json::to_string(&row).context("cannot format JSON")?;
            writeln!(out, "{line}").context("cannot write to stdout")?;
            out.flush().context("cannot write to stdout")?;
        } else {
            rows.push(table_row(&row));
        }
    }
    if !args.json {
        out.write_all(table::render(&COLUMNS, &rows).as_bytes())
            .context("cannot write to stdout")?;
    }
    out.flush().context("cannot write to stdout")
}

/// The tensors to feed, and a description of where they came from.
fn load_data(args: &BenchArgs) -> Result<(Vec<Vec<f32>>, String)> {
    let n = usize::try_from(args.elements).context("--elements is too large")?;
    // Bounded to 1..=1024 by the parser.
    let steps = args.tensors as usize;
    match &args.input {
        None => Ok((
            gradient::gradient_steps(n, steps, gradient::SEED),
            "generated gradient-like data".to_string(),
        )),
        Some(path) => {
            let mut values = rawf32::read_f32_file(path)?;
            if values.is_empty() {
                bail!("{} holds no values", path.display());
            }
            values.truncate(n);
            let source = format!("{} (perturbed)", path.display());
            Ok((
                gradient::perturbed_steps(&values, steps, gradient::SEED),
                source,
            ))
        }
    }
}

/// Times one codec over the tensors.
fn bench_row(codec: Codec, data: &[Vec<f32>], iterations: Option<u64>) -> Result<BenchRow> {
    let n = data.first().map_or(0, Vec::len);
    let feedback = Feedback::default_for(&codec);
    let mut encoder = Encoder::new(codec, feedback);
    let limits = Limits {
        max_elements: n as u64,
    };
    let mut frame = Vec::with_capacity(4 * n + 64);
    let mut decoded = vec![0f32; n];
    let mut copy = vec![0f32; n];
    let (mut enc, mut dec, mut mem) = (Vec::new(), Vec::new(), Vec::new());
    let mut bits = 0.0;
    // Bring the context to its steady state first: with error feedback the
    // first frames of a stream are far sparser than the later ones, and
    // caches and branch predictors warm up too. Not timed.
    for (step, x) in data.iter().cycle().take(WARMUP_STEPS).enumerate() {
        frame.clear();
        encoder
            .encode(x, &mut frame)
            .with_context(|| format!("cannot encode tensor {}", step % data.len()))?;
    }
    let start = Instant::now();
    let mut i = 0usize;
    loop {
        let x = black_box(&data[i % data.len()]);
        frame.clear();
        let t = Instant::now();
        encoder
            .encode(x, &mut frame)
            .with_context(|| format!("cannot encode tensor {}", i % data.len()))?;
        let encode_time = t.elapsed();
        black_box(&frame);

        let t = Instant::now();
        let parsed = Frame::parse(black_box(&frame), &limits).context("cannot parse own frame")?;
        parsed
            .decode_into(&mut decoded)
            .context("cannot decode own frame")?;
        let decode_time = t.elapsed();
        black_box(&decoded);

        let t = Instant::now();
        copy.copy_from_slice(x);
        let copy_time = t.elapsed();
        black_box(&copy);

        enc.push(encode_time);
        dec.push(decode_time);
        mem.push(copy_time);
        bits += parsed.payload_bits_per_value();
        i += 1;
        let done = match iterations {
            Some(want) => enc.len() as u64 >= want,
            None => {
                enc.len() >= MAX_ITERATIONS
                    || (enc.len() >= MIN_ITERATIONS && start.elapsed() >= TARGET)
            }
        };
        if done {
            break;
        }
    }
    let count = enc.len();
    let gbps = |times: &mut Vec<Duration>| {
        let seconds = median(times).as_secs_f64().max(1e-9);
        (n * rawf32::F32_BYTES) as f64 / seconds / 1e9
    };
    Ok(BenchRow {
        codec: codec.id().name(),
        sparsity: match codec {
            Codec::ThreeLc { sparsity } => Some(sparsity.get()),
            _ => None,
        },
        k: match codec {
            Codec::TopK { percent } => Some(percent.get()),
            _ => None,
        },
        feedback: feedback == Feedback::On,
        elements: n,
        iterations: count,
        encode_gbps: gbps(&mut enc),
        decode_gbps: gbps(&mut dec),
        memcpy_gbps: gbps(&mut mem),
        bits_per_value: bits / count as f64,
        label: spec::label(&codec),
    })
}

/// The median of at least one duration (mean of the middle two for an even count).
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let mid = times.len() / 2;
    match times.len() {
        0 => Duration::ZERO,
        len if len % 2 == 1 => times[mid],
        _ => (times[mid - 1] + times[mid]) / 2,
    }
}

const COLUMNS: [(&str, Align); 8] = [
    ("codec", Align::Left),
    ("feedback", Align::Left),
    ("bits/value", Align::Right),
    ("encode GB/s", Align::Right),
    ("decode GB/s", Align::Right),
    ("memcpy GB/s", Align::Right),
    ("enc/memcpy", Align::Right),
    ("iterations", Align::Right),
];

fn table_row(row: &BenchRow) -> Vec<String> {
    vec![
        row.label.clone(),
        if row.feedback { "on" } else { "off" }.to_string(),
        format!("{:.3}", row.bits_per_value),
        format!("{:.3}", row.encode_gbps),
        format!("{:.3}", row.decode_gbps),
        format!("{:.3}", row.memcpy_gbps),
        format!("{:.3}", row.encode_gbps / row.memcpy_gbps),
        row.iterations.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(
            median(&mut [ms(4), ms(1), ms(2), ms(3)]),
            Duration::from_micros(2500)
        );
    }
}
