//! `tlcctl codec encode`: raw f32 tensors in, concatenated frames out.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use tlc_codec::{Encoder, Feedback};

use super::rawf32;
use super::spec::{self, Settings};

/// Arguments of `codec encode`.
#[derive(Debug, Args)]
#[command(after_help = "\
Without --chunk the whole input is one tensor and OUT holds one frame. With
--chunk N the input is a sequence of tensors of N values, encoded in order
through one encoder (so error feedback carries over from one to the next),
and OUT holds one frame per tensor, back to back.")]
pub struct EncodeArgs {
    /// Codec: none, fp16, bf16, int8, terngrad, onebit, topk, 3lc, or the
    /// presets topk5 and topk25.
    #[arg(long, value_name = "NAME", default_value = "3lc")]
    codec: String,

    /// 3LC sparsity multiplier s, 1.0 <= s < 2.0 (default 1.0).
    #[arg(long, value_name = "S")]
    sparsity: Option<f32>,

    /// Top-k share of values to keep, in percent, 0 < k <= 100 (default 25).
    #[arg(long, value_name = "PERCENT")]
    k: Option<f32>,

    /// TernGrad random seed (default 0).
    #[arg(long, value_name = "SEED")]
    seed: Option<u64>,

    /// Error feedback (default: on for 3lc, onebit and topk, off otherwise).
    #[arg(long, value_name = "ON|OFF")]
    feedback: Option<Switch>,

    /// Values per tensor: encode the input as a sequence of tensors of N
    /// values (the file must hold a whole number of them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    chunk: Option<u64>,

    /// Input: raw little-endian f32 values.
    #[arg(value_name = "IN")]
    input: PathBuf,

    /// Output: concatenated tlc frames (replaced only on success).
    #[arg(value_name = "OUT")]
    output: PathBuf,
}

/// An on/off switch on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

impl From<Switch> for Feedback {
    fn from(switch: Switch) -> Feedback {
        match switch {
            Switch::On => Feedback::On,
            Switch::Off => Feedback::Off,
        }
    }
}

/// Runs `codec encode`.
pub fn run(args: &EncodeArgs, verbose: bool) -> Result<()> {
    let settings = Settings {
        sparsity: args.sparsity,
        k: args.k,
        seed: args.seed,
    };
    let codec = spec::build(&args.codec, settings)?;
    let feedback = args
        .feedback
        .map(Feedback::from)
        .unwrap_or_else(|| Feedback::default_for(&codec));
    let values = rawf32::read_f32_file(&args.input)?;
    let input = args.input.display();

    let tensors: Vec<&[f32]> = match args.chunk {
        None => vec![&values[..]],
        Some(chunk) => {
            let chunk = usize::try_from(chunk).context("--chunk is too large")?;
            if values.len() % chunk != 0 {
                bail!(
                    "{input} holds {} values ({} bytes), not a whole number of tensors of \
                     {chunk} values (--chunk {chunk})",
                    values.len(),
                    values.len() * rawf32::F32_BYTES
                );
            }
            values.chunks_exact(chunk).collect()
        }
    };

    let mut encoder = Encoder::new(codec, feedback);
    let mut out = Vec::new();
    let mut payload_bytes = 0u64;
    let mut start = 0usize;
    for (index, tensor) in tensors.iter().enumerate() {
        let end = start + tensor.len();
        let header = encoder.encode(tensor, &mut out).with_context(|| {
            if args.chunk.is_some() {
                format!("cannot encode tensor {index} (values {start}..{end}) of {input}")
            } else {
                format!("cannot encode {input}")
            }
        })?;
        payload_bytes += u64::from(header.payload_len);
        start = end;
    }

    rawf32::write_atomically(&args.output, |w| {
        w.write_all(&out)
            .with_context(|| format!("cannot write {}", args.output.display()))
    })?;

    if verbose {
        let bits = if values.is_empty() {
            0.0
        } else {
            payload_bytes as f64 * 8.0 / values.len() as f64
        };
        eprintln!(
            "tlcctl: encoded {} values in {} frame(s) with {}, feedback {}: {} -> {} bytes \
             ({bits:.3} payload bits/value)",
            values.len(),
            tensors.len(),
            spec::label(&codec),
            if feedback == Feedback::On {
                "on"
            } else {
                "off"
            },
            values.len() * rawf32::F32_BYTES,
            out.len(),
        );
    }
    Ok(())
}
