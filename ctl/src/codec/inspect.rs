//! `tlcctl codec inspect`: validate concatenated frames and describe each.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use tlc_codec::{Limits, Params};

use super::frames::{Frames, Located};
use super::rawf32;
use super::spec;
use crate::table::{self, Align};

/// Arguments of `codec inspect`.
#[derive(Debug, Args)]
#[command(after_help = "\
Every frame is fully checked (header, checksum, payload) and decoded; the
first bad frame stops the listing with an error naming its index and byte
offset. With --json each line is one object with the keys index, offset,
codec, elements, scale, sparsity, feedback, header_bytes, payload_offset,
payload_bytes, frame_bytes and bits_per_value, plus positive and negative
(onebit) or percent and kept (topk). scale is M for 3lc, the step for int8,
the scale for terngrad and null otherwise; sparsity is null except for 3lc.")]
pub struct InspectArgs {
    /// Print one JSON object per frame and line instead of a table.
    #[arg(long)]
    json: bool,

    /// Refuse any frame that claims more values than this.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_elements)]
    max_elements: u64,

    /// Input: concatenated tlc frames.
    #[arg(value_name = "IN")]
    input: PathBuf,
}

/// What inspect reports about one frame.
#[derive(Debug, Clone, Serialize)]
pub struct FrameInfo {
    /// Position of the frame in the input, from 0.
    pub index: usize,
    /// Byte offset of the frame in the input.
    pub offset: usize,
    /// Codec name.
    pub codec: &'static str,
    /// Number of values.
    pub elements: u64,
    /// M for 3lc, step for int8, scale for terngrad.
    pub scale: Option<f32>,
    /// The sender's sparsity multiplier (3lc only).
    pub sparsity: Option<f32>,
    /// Whether the sender used error feedback.
    pub feedback: bool,
    /// Bytes of header (fixed part and codec parameters).
    pub header_bytes: usize,
    /// Byte offset of the codec payload in the input.
    pub payload_offset: usize,
    /// Bytes of codec payload.
    pub payload_bytes: u32,
    /// Bytes of the whole frame, checksum included.
    pub frame_bytes: usize,
    /// Payload bits per value.
    pub bits_per_value: f64,
    /// onebit: the value a set bit decodes to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub positive: Option<f32>,
    /// onebit: the value a clear bit decodes to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative: Option<f32>,
    /// topk: the share asked for, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<f32>,
    /// topk: the number of values kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<u32>,
    /// int8-rows: values per row (each row's step is in the payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_len: Option<u32>,
}

impl FrameInfo {
    /// Describes a located frame.
    pub fn new(located: &Located<'_>) -> FrameInfo {
        let header = &located.frame.header;
        let mut info = FrameInfo {
            index: located.index,
            offset: located.offset,
            codec: header.codec().name(),
            elements: header.elements,
            scale: None,
            sparsity: None,
            feedback: header.feedback,
            header_bytes: header.header_len(),
            payload_offset: located.payload_offset(),
            payload_bytes: header.payload_len,
            frame_bytes: located.frame_len(),
            bits_per_value: located.frame.payload_bits_per_value(),
            positive: None,
            negative: None,
            percent: None,
            kept: None,
            row_len: None,
        };
        match header.params {
            Params::None | Params::Fp16 | Params::Bf16 => {}
            Params::Int8 { step } => info.scale = Some(step),
            Params::Int8Rows { row_len } => info.row_len = Some(row_len),
            Params::TernGrad { scale } => info.scale = Some(scale),
            Params::ThreeLc { scale, sparsity } => {
                info.scale = Some(scale);
                info.sparsity = Some(sparsity);
            }
            Params::OneBit { positive, negative } => {
                info.positive = Some(positive);
                info.negative = Some(negative);
            }
            Params::TopK { percent, kept } => {
                info.percent = Some(percent);
                info.kept = Some(kept);
            }
        }
        info
    }

    /// Codec-specific extras as text, for the table.
    fn extras(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(p), Some(n)) = (self.positive, self.negative) {
            parts.push(format!("positive={p:e} negative={n:e}"));
        }
        if let (Some(percent), Some(kept)) = (self.percent, self.kept) {
            parts.push(format!("k={percent}% kept={kept}"));
        }
        if let Some(row_len) = self.row_len {
            parts.push(format!("row={row_len}"));
        }
        parts.join(" ")
    }

    fn row(&self) -> Vec<String> {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        vec![
            self.index.to_string(),
            self.offset.to_string(),
            self.codec.to_string(),
            self.elements.to_string(),
            opt(self.scale.map(|s| format!("{s:e}"))),
            opt(self.sparsity.map(spec::number)),
            if self.feedback { "on" } else { "off" }.to_string(),
            self.header_bytes.to_string(),
            self.payload_offset.to_string(),
            self.payload_bytes.to_string(),
            self.frame_bytes.to_string(),
            format!("{:.3}", self.bits_per_value),
            self.extras(),
        ]
    }
}

const COLUMNS: [(&str, Align); 13] = [
    ("frame", Align::Right),
    ("offset", Align::Right),
    ("codec", Align::Left),
    ("elements", Align::Right),
    ("scale", Align::Right),
    ("sparsity", Align::Right),
    ("feedback", Align::Left),
    ("header", Align::Right),
    ("payload@", Align::Right),
    ("payload", Align::Right),
    ("frame_bytes", Align::Right),
    ("bits/value", Align::Right),
    ("extra", Align::Left),
];

/// Runs `codec inspect`.
pub fn run(args: &InspectArgs) -> Result<()> {
    let bytes = rawf32::read_bytes(&args.input)?;
    let limits = Limits {
        max_elements: args.max_elements,
    };
    let input = args.input.display();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut rows = Vec::new();
    let mut decoded = Vec::new();
    let mut result = Ok(());
    for located in Frames::new(&bytes, limits) {
        let checked = located.and_then(|l| l.decode_into(&mut decoded).map(|()| l));
        let located = match checked {
            Ok(located) => located,
            Err(err) => {
                result = Err(err.context(format!("invalid frame in {input}")));
                break;
            }
        };
        let info = FrameInfo::new(&located);
        if args.json {
            let line = serde_json::to_string(&info).context("cannot format JSON")?;
            writeln!(out, "{line}").context("cannot write to stdout")?;
        } else {
            rows.push(info.row());
        }
    }
    if !args.json {
        // The frames before a bad one are still worth seeing.
        out.write_all(table::render(&COLUMNS, &rows).as_bytes())
            .context("cannot write to stdout")?;
    }
    out.flush().context("cannot write to stdout")?;
    result
}
