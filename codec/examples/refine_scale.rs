//! How many bytes a refinement costs, by how its 3LC scale is chosen: the
//! figures behind `tlc3::toward` and the daemon's `context::refine`.
//!
//!     cargo run --release -p tlc-codec --example refine_scale
//!
//! First table: one tensor (Gaussian, Laplace, Student-t with 3 degrees of
//! freedom; 100k values) refined from nothing until its relative L2 error
//! is under a target, with `M = max` every pass ("max"), the `M` that
//! removes the most error ("l2opt"), max first and then l2opt, or
//! `M = max / 2`. Second table ("sim"): pull steps as a replica sees them,
//! a model that moves by `step` (relative L2) per step, passes until the
//! replica's drift is under the target: `M = max` every pass, l2opt, or
//! "aware" (`tlc3::toward`: the fewest nonzero trits that reach the target,
//! else l2opt). Bits per value include 21 bytes of frame header per pass.

use tlc_codec::tlc3::{quantize, zero_run};

fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64) / ((1u64 << 53) as f64)
    }
}

fn gauss(n: usize, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| {
            let (u, v) = (r().max(1e-12), r());
            ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
        })
        .collect()
}
fn laplace(n: usize, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| {
            let u = r() - 0.5;
            (-u.signum() * (1.0 - 2.0 * u.abs()).max(1e-12).ln()) as f32
        })
        .collect()
}
fn student3(n: usize, seed: u64) -> Vec<f32> {
    let g = gauss(n * 4, seed);
    (0..n)
        .map(|i| {
            let c = (g[4 * i + 1].powi(2) + g[4 * i + 2].powi(2) + g[4 * i + 3].powi(2)) / 3.0;
            g[4 * i] / c.sqrt().max(1e-6)
        })
        .collect()
}

fn l2(v: &[f32]) -> f64 {
    v.iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

/// L2-optimal scale among candidates max * 2^(-k/4).
fn best_scale(r: &[f32], max: f32) -> f32 {
    let cands: Vec<f32> = (0..24)
        .map(|k| max * 2f32.powf(-(k as f32) / 4.0))
        .collect();
    let mut gain = vec![0f64; cands.len()];
    for &a in r {
        let a = a.abs() as f64;
        for (g, &m) in gain.iter_mut().zip(&cands) {
            let m = m as f64;
            if a > m / 2.0 {
                *g += m * (2.0 * a - m);
            }
        }
    }
    let (i, _) = gain
        .iter()
        .enumerate()
        .fold((0, -1.0), |b, (i, &g)| if g > b.1 { (i, g) } else { b });
    cands[i]
}

/// Candidates with gain and nonzero counts.
fn candidates(r: &[f32], max: f32) -> Vec<(f32, f64, usize)> {
    let cands: Vec<f32> = (0..32)
        .map(|k| max * 2f32.powf(-(k as f32) / 4.0))
        .collect();
    let mut gain = vec![0f64; cands.len()];
    let mut nz = vec![0usize; cands.len()];
    for &a in r {
        let a = a.abs() as f64;
        for ((g, c), &m) in gain.iter_mut().zip(nz.iter_mut()).zip(&cands) {
            let m = m as f64;
            if a > m / 2.0 {
                *g += m * (2.0 * a - m);
                *c += 1;
            }
        }
    }
    cands
        .into_iter()
        .zip(gain)
        .zip(nz)
        .map(|((m, g), c)| (m, g, c))
        .collect()
}

/// Fewest nonzeros reaching `need` (squared L2 to remove), else max gain.
fn aware_scale(r: &[f32], max: f32, need: f64) -> f32 {
    let c = candidates(r, max);
    if let Some(best) = c.iter().filter(|x| x.1 >= need).min_by_key(|x| x.2) {
        return best.0;
    }
    c.iter().fold(c[0], |b, x| if x.1 > b.1 { *x } else { b }).0
}

fn pass(e: &mut [f32], m: f32, out: &mut Vec<u8>) -> usize {
    let zero = vec![0f32; e.len()];
    out.resize(e.len().div_ceil(5), 0);
    quantize::quantize_pack(&zero, Some(e), m, out);
    zero_run::encode_in_place(out) + 21
}

/// Pull steps: model V moves by d each step; replica gap e = V - R.
fn simulate(x0: &[f32], step_rel: f64, target: f64, mode: u8, steps: usize) -> (f64, f64) {
    let n = x0.len();
    let mut v = x0.to_vec();
    let mut e = vec![0f32; n];
    let mut out = Vec::new();
    let (mut bytes, mut passes) = (0usize, 0usize);
    let vn = l2(&v);
    for t in 0..steps {
        let d = laplace(n, 100 + t as u64);
        let scale = (step_rel * vn / l2(&d)) as f32;
        for ((vi, ei), di) in v.iter_mut().zip(e.iter_mut()).zip(&d) {
            *vi += di * scale;
            *ei += di * scale;
        }
        let norm = l2(&v);
        let mut p = 0;
        loop {
            let max = e.iter().fold(0f32, |m, a| m.max(a.abs()));
            let m = if p == 0 || mode == 0 {
                max
            } else if mode == 1 {
                best_scale(&e, max)
            } else {
                let err2 = l2(&e).powi(2);
                aware_scale(&e, max, err2 - (target * norm).powi(2))
            };
            bytes += pass(&mut e, m, &mut out);
            p += 1;
            if l2(&e) / norm <= target || p >= 8 {
                break;
            }
        }
        passes += p;
    }
    (
        bytes as f64 * 8.0 / (n * steps) as f64,
        passes as f64 / steps as f64,
    )
}

fn run(x: &[f32], target: f64, mode: u8) -> (usize, usize, f64) {
    let norm = l2(x);
    let mut e = x.to_vec();
    let zero = vec![0f32; x.len()];
    let mut bytes = 0;
    let mut passes = 0;
    let mut out = vec![0u8; x.len().div_ceil(5)];
    loop {
        let err = l2(&e) / norm;
        if err <= target || passes >= 16 {
            return (bytes, passes, err);
        }
        let max = e.iter().fold(0f32, |m, a| m.max(a.abs()));
        let m = match mode {
            0 => max,
            1 => best_scale(&e, max),
            2 => {
                if passes == 0 {
                    max
                } else {
                    best_scale(&e, max)
                }
            }
            _ => max * 0.5f32.powi(1),
        };
        quantize::quantize_pack(&zero, Some(&mut e), m, &mut out);
        let mut o = out.clone();
        bytes += zero_run::encode_in_place(&mut o) + 21;
        passes += 1;
    }
}

fn main() {
    let n = 100_000;
    for (name, x) in [
        ("gauss", gauss(n, 1)),
        ("laplace", laplace(n, 2)),
        ("student3", student3(n, 3)),
    ] {
        for target in [0.5, 0.1, 0.02, 0.01] {
            let mut line = format!("{name:9} target {target:5}:");
            for (mode, label) in [(0u8, "max"), (1, "l2opt"), (2, "max+l2"), (3, "max/2")] {
                let (b, p, err) = run(&x, target, mode);
                line += &format!(
                    "  {label}: {:.3} bits/v {p}p err {err:.4}",
                    b as f64 * 8.0 / n as f64
                );
            }
            println!("{line}");
        }
    }
    let v = gauss(n, 9);
    for step_rel in [0.002, 0.01, 0.03, 0.1] {
        for target in [0.01, 0.02] {
            let mut line = format!("sim step {step_rel} target {target}:");
            for (mode, label) in [(0u8, "max"), (1, "l2opt"), (2, "aware")] {
                let (b, p) = simulate(&v, step_rel, target, mode, 30);
                line += &format!("  {label}: {b:.3} bits/v {p:.2} passes");
            }
            println!("{line}");
        }
    }
}
