//! Which entropy coder goes after 3LC's zero-run stage: zstd (levels 1, 3
//! and 19) against an order-0 static rANS written here, on the payloads
//! one 3LC context with error feedback writes at s = 1.0, 1.5 and 1.75.
//!
//!     cargo bench -p tlc-codec --bench entropy_choice [-- GRADS.f32 N]
//!
//! With a file (raw little-endian f32, tensors of `N` values back to back,
//! as `scripts/mlp_gradients.py` writes) the tensors come from it; without
//! one, 40 synthetic gradient-like tensors of 524,288 values.
//!
//! First table: payload bits per value (frame header and checksum not
//! counted; each coder's own tables and the 4-byte `raw_len` counted), and
//! the order-0 entropy of the payload bytes as the bound. Second table:
//! GB/s of f32 input for each coder alone (one context reused), and for
//! the whole `Encoder`/`decode` path with the stage off and on.

mod common;

use std::time::Instant;

use tlc_codec::{decode, Codec, Encoder, EntropyStage, Feedback, Frame, Limits, Sparsity};

/// Heavy-tailed values centred on zero (as in `benches/codecs.rs`), with a
/// slowly varying per-column scale.
fn gradient_like(n: usize, seed: u64) -> Vec<f32> {
    let mut uniform = common::uniform(seed);
    (0..n)
        .map(|i| {
            let sign = if uniform() < 0.5 { -1.0 } else { 1.0 };
            let column = 1.0 + ((i % 512) as f32 * 0.05).sin();
            let scale = 1e-3 * column * (2.0 * (uniform() - 0.5)).exp();
            sign * scale * -uniform().ln()
        })
        .collect()
}

fn tensors() -> (String, Vec<Vec<f32>>) {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let [path, n] = &args[..] {
        let n: usize = n.parse().expect("N is a number");
        let bytes = std::fs::read(path).expect("reads the gradient file");
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let list = values.chunks_exact(n).map(<[f32]>::to_vec).collect();
        (path.clone(), list)
    } else {
        let list = (0..40).map(|s| gradient_like(524_288, s)).collect();
        ("synthetic".to_string(), list)
    }
}

/// Order-0 static rANS over bytes: 32-bit state, byte renormalisation,
/// frequencies scaled to 2^14 and sent as a 32-byte presence bitmap and
/// two bytes per present symbol.
mod rans {
    const SCALE_BITS: u32 = 14;
    const TOTAL: u32 = 1 << SCALE_BITS;
    const LOW: u32 = 1 << 23;

    /// Frequencies scaled to `TOTAL`, every present symbol at least 1.
    pub fn normalize(data: &[u8]) -> [u32; 256] {
        let mut counts = [0u64; 256];
        for &b in data {
            counts[usize::from(b)] += 1;
        }
        let total: u64 = counts.iter().sum();
        let mut freq = [0u32; 256];
        if total == 0 {
            return freq;
        }
        for (f, &c) in freq.iter_mut().zip(&counts) {
            if c > 0 {
                *f = ((c * u64::from(TOTAL)) / total).max(1) as u32;
            }
        }
        let sum: u32 = freq.iter().sum();
        let top = (0..256).max_by_key(|&s| freq[s]).unwrap_or(0);
        freq[top] = (freq[top] + TOTAL) - sum;
        freq
    }

    /// Bytes of the table as sent.
    pub fn table_len(freq: &[u32; 256]) -> usize {
        32 + 2 * freq.iter().filter(|&&f| f > 0).count()
    }

    pub fn encode(data: &[u8], freq: &[u32; 256], out: &mut Vec<u8>) {
        let mut cum = [0u32; 257];
        for s in 0..256 {
            cum[s + 1] = cum[s] + freq[s];
        }
        let start = out.len();
        let mut x = LOW;
        for &b in data.iter().rev() {
            let s = usize::from(b);
            let f = freq[s];
            let x_max = ((LOW >> SCALE_BITS) << 8) * f;
            while x >= x_max {
                out.push(x as u8);
                x >>= 8;
            }
            x = ((x / f) << SCALE_BITS) + (x % f) + cum[s];
        }
        out.extend_from_slice(&x.to_le_bytes());
        out[start..].reverse();
    }

    pub fn decode(coded: &[u8], freq: &[u32; 256], out: &mut [u8]) -> Option<()> {
        let mut slot = vec![0u8; TOTAL as usize];
        let mut cum = [0u32; 257];
        for s in 0..256 {
            cum[s + 1] = cum[s] + freq[s];
            slot[cum[s] as usize..cum[s + 1] as usize].fill(s as u8);
        }
        let head = coded.get(..4)?;
        let mut x = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let mut at = 4;
        for o in out.iter_mut() {
            let r = x & (TOTAL - 1);
            let s = slot[r as usize];
            *o = s;
            let s = usize::from(s);
            x = freq[s] * (x >> SCALE_BITS) + r - cum[s];
            while x < LOW {
                x = (x << 8) | u32::from(*coded.get(at)?);
                at += 1;
            }
        }
        Some(())
    }
}

/// Seconds `f` takes, the best of five runs (the machine is shared).
fn time<F: FnMut()>(mut f: F) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Order-0 entropy of `data`, in bits.
fn entropy_bits(data: &[u8]) -> f64 {
    let mut counts = [0usize; 256];
    for &b in data {
        counts[usize::from(b)] += 1;
    }
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| -(c as f64) * (c as f64 / data.len() as f64).log2())
        .sum()
}

/// zstd over every payload with one reused context: sizes (with `raw_len`)
/// and seconds.
fn zstd_all(payloads: &[&[u8]], level: i32) -> (Vec<Vec<u8>>, f64) {
    let mut compressor = zstd::bulk::Compressor::new(level).expect("zstd context");
    let mut coded = Vec::new();
    let seconds = time(|| {
        coded = payloads
            .iter()
            .map(|p| compressor.compress(p).expect("compresses"))
            .collect();
    });
    (coded, seconds)
}

struct Row {
    s: f32,
    bits: Vec<f64>,
    speed: Vec<f64>,
}

fn measure(s: f32, tensors: &[Vec<f32>]) -> Row {
    let values = (tensors.len() * tensors[0].len()) as f64;
    let gbps = |seconds: f64| values * 4.0 / seconds / 1e9;
    let bpv = |bytes: usize| bytes as f64 * 8.0 / values;
    let codec = Codec::ThreeLc {
        sparsity: Sparsity::new(s).expect("valid sparsity"),
    };
    // The whole path, stage off and on, tensor by tensor: both encoders see
    // the same stream (the stage is lossless, so their residuals agree);
    // each tensor's encode (on copies of the encoder) and decode is timed
    // the best of three, off and on in turn, so load on the shared machine
    // hits both alike. Seconds are the sums of the per-tensor bests.
    let mut encoders = [
        Encoder::new(codec, Feedback::On),
        Encoder::new(codec, Feedback::On),
    ];
    encoders[1].set_entropy_stage(EntropyStage::Zstd);
    // (frames, encode seconds, decode seconds), off and on.
    let mut paths = [(Vec::new(), 0.0, 0.0), (Vec::new(), 0.0, 0.0)];
    let mut out = Vec::new();
    for x in tensors {
        let mut best = [[f64::INFINITY; 2]; 2];
        for _ in 0..3 {
            for (i, encoder) in encoders.iter().enumerate() {
                let mut copy = encoder.clone();
                let mut frame = Vec::new();
                let start = Instant::now();
                copy.encode(x, &mut frame).expect("encodes");
                best[i][0] = best[i][0].min(start.elapsed().as_secs_f64());
            }
        }
        for (i, encoder) in encoders.iter_mut().enumerate() {
            let mut frame = Vec::new();
            encoder.encode(x, &mut frame).expect("encodes");
            paths[i].0.push(frame);
        }
        for _ in 0..3 {
            for (i, path) in paths.iter().enumerate() {
                let frame = path.0.last().expect("a frame");
                let start = Instant::now();
                decode(frame, &Limits::default(), &mut out).expect("decodes");
                best[i][1] = best[i][1].min(start.elapsed().as_secs_f64());
            }
        }
        for (path, best) in paths.iter_mut().zip(best) {
            path.1 += best[0];
            path.2 += best[1];
        }
    }
    let payloads: Vec<&[u8]> = paths[0]
        .0
        .iter()
        .map(|f| Frame::parse(f, &Limits::default()).expect("parses").payload)
        .collect();
    let raw: usize = payloads.iter().map(|p| p.len()).sum();
    let staged: usize = paths[1]
        .0
        .iter()
        .map(|f| {
            Frame::parse(f, &Limits::default())
                .expect("parses")
                .header
                .payload_len as usize
        })
        .sum();
    let bound: f64 = payloads.iter().map(|p| entropy_bits(p)).sum::<f64>() / 8.0;

    let mut bits = vec![bpv(raw), bpv(staged)];
    let mut speed = vec![gbps(paths[0].1), gbps(paths[1].1)];
    let (z1, z1_s) = zstd_all(&payloads, 1);
    let mut decompressor = zstd::bulk::Decompressor::new().expect("zstd context");
    let mut buf = vec![0u8; tensors[0].len().div_ceil(5)];
    let z1_d = time(|| {
        for (c, p) in z1.iter().zip(&payloads) {
            let len = decompressor
                .decompress_to_buffer(c, &mut buf[..p.len()])
                .expect("decompresses");
            assert_eq!(&buf[..len], *p);
        }
    });
    speed.extend([gbps(z1_s), gbps(z1_d)]);
    for level in [1, 3, 19] {
        let (coded, seconds) = zstd_all(&payloads, level);
        bits.push(bpv(coded.iter().map(|c| c.len() + 4).sum()));
        if level == 3 {
            speed.push(gbps(seconds));
        }
    }
    let mut coded = Vec::new();
    let mut freqs = Vec::new();
    let rans_e = time(|| {
        coded.clear();
        freqs.clear();
        for p in &payloads {
            let freq = rans::normalize(p);
            let mut out = Vec::new();
            rans::encode(p, &freq, &mut out);
            coded.push(out);
            freqs.push(freq);
        }
    });
    let rans_d = time(|| {
        for ((c, p), f) in coded.iter().zip(&payloads).zip(&freqs) {
            rans::decode(c, f, &mut buf[..p.len()]).expect("decodes");
            assert_eq!(&buf[..p.len()], *p);
        }
    });
    speed.extend([
        gbps(rans_e),
        gbps(rans_d),
        gbps(paths[0].2),
        gbps(paths[1].2),
    ]);
    let rans_len = coded
        .iter()
        .zip(&freqs)
        .map(|(c, f)| c.len() + rans::table_len(f) + 4)
        .sum();
    bits.extend([bpv(rans_len), bound * 8.0 / values]);
    Row { s, bits, speed }
}

fn main() {
    let (source, tensors) = tensors();
    println!(
        "{source}: {} tensors of {} values, 3LC with error feedback",
        tensors.len(),
        tensors[0].len()
    );
    let rows: Vec<Row> = [1.0, 1.5, 1.75]
        .into_iter()
        .map(|s| measure(s, &tensors))
        .collect();
    println!("\npayload bits per value (x: ratio to the 3LC payload)");
    let names = [
        "3lc", "stage", "zstd1", "zstd3", "zstd19", "rans0", "entropy0",
    ];
    print!("{:>5}", "s");
    for name in names {
        print!(" {name:>15}");
    }
    println!();
    for row in &rows {
        print!("{:>5}", row.s);
        for b in &row.bits {
            print!(" {b:>8.4} {:>5.2}x", row.bits[0] / b);
        }
        println!();
    }
    println!("\nGB/s of f32 input");
    let names = [
        "3lc enc",
        "+stage enc",
        "zstd1 enc",
        "zstd1 dec",
        "zstd3 enc",
        "rans0 enc",
        "rans0 dec",
        "3lc dec",
        "+stage dec",
    ];
    print!("{:>5}", "s");
    for name in names {
        print!(" {name:>10}");
    }
    println!();
    for row in &rows {
        print!("{:>5}", row.s);
        for v in &row.speed {
            print!(" {v:>10.2}");
        }
        println!();
    }
}
