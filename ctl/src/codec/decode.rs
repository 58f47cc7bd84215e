//! `tlcctl codec decode`: concatenated frames in, raw f32 out.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tlc_codec::Limits;

use super::frames::Frames;
use super::rawf32;

/// Arguments of `codec decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Refuse any frame that claims more values than this.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_elements)]
    max_elements: u64,

    /// Input: concatenated tlc frames.
    #[arg(value_name = "IN")]
    input: PathBuf,

    /// Output: raw little-endian f32, the frames' values in order (replaced
    /// only on success).
    #[arg(value_name = "OUT")]
    output: PathBuf,
}

/// Runs `codec decode`.
pub fn run(args: &DecodeArgs, verbose: bool) -> Result<()> {
    let bytes = rawf32::read_bytes(&args.input)?;
    let limits = Limits {
        max_elements: args.max_elements,
    };
    let input = args.input.display();
    let output = args.output.display();
    let mut frames = 0usize;
    let mut values = 0u64;
    rawf32::write_atomically(&args.output, |w| {
        let mut decoded = Vec::new();
        let mut raw = Vec::new();
        for located in Frames::new(&bytes, limits) {
            let located = located.with_context(|| format!("cannot decode {input}"))?;
            located
                .decode_into(&mut decoded)
                .with_context(|| format!("cannot decode {input}"))?;
            raw.clear();
            rawf32::extend_le_bytes(&mut raw, &decoded);
            w.write_all(&raw)
                .with_context(|| format!("cannot write {output}"))?;
            frames += 1;
            values += decoded.len() as u64;
        }
        Ok(())
    })?;
    if verbose {
        eprintln!("tlcctl: decoded {frames} frame(s), {values} values, from {input} to {output}");
    }
    Ok(())
}
