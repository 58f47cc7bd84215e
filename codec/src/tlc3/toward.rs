//! The scale of a refinement pass: the `M` that brings the error under a
//! goal with the fewest nonzero trits.
//!
//! 3LC's own scale, `M = max|acc| * s`, moves only the elements above
//! `M / 2`. That is right for a first pass, where it is what the paper
//! measured, but a pass sent only to shrink what is left (a refinement, see
//! the daemon's `context::refine`) wants the `M` that removes the most
//! error per byte. Setting an element with `|a| > M / 2` to `a - M*sign(a)`
//! removes `M (2|a| - M)` of squared error; elements at or below `M / 2`
//! stay. So for each candidate `M` the removed error and the nonzero count
//! are sums over the elements above `M / 2`, which one histogram pass
//! gives for all candidates at once.
//!
//! Which candidates: a pass that reaches the goal must use an `M` from
//! `max|acc|` down to `max|acc| / 2`. Then no element keeps more than
//! `max / 2` when refinement stops, as after a pass at 3LC's own scale, so
//! the values that move most are never the ones left behind (a smaller `M`
//! clamps the largest elements to one trit and leaves them most of their
//! error). A pass that cannot reach the goal may go lower, down ten
//! octaves, to remove the most: the largest elements it clamps are then
//! the largest of what is left, which the next pass takes first. Measured
//! on real jobs (docs/COMPRESSION.md, "Refinement").
//!
//! The frame is an ordinary 3LC frame: `M` travels in it and decoding uses
//! `M` alone, so a receiver needs nothing new.

/// Candidate thresholds per octave of `|a|` (two mantissa bits).
const PER_OCTAVE: usize = 4;
/// Candidates a pass that reaches its goal may use: `M = max * {1, 7/8,
/// 3/4, 5/8, 1/2}`.
const REACHING: usize = PER_OCTAVE + 1;
/// Octaves below `max|acc|` a pass that cannot reach its goal searches;
/// smaller `M` would touch nearly every element for little error.
const OCTAVES: usize = 10;
const BINS: usize = PER_OCTAVE * OCTAVES;

/// Picks `M` for a pass over `acc = x + e` whose largest magnitude is
/// `max`, so that the squared error left, `Σ acc² − removed(M)`, is at most
/// `allowed`: among the candidates from `max` to `max / 2` that reach it,
/// the one with the fewest nonzero trits; when none does, the candidate
/// down to `max / 1024` that removes the most. Returns
/// `max` itself when `max` is 0 or not finite (the caller's encoder then
/// refuses or sends zeros as usual).
pub fn scale_toward(x: &[f32], e: Option<&[f32]>, max: f32, allowed: f64) -> f32 {
    if !(max.is_finite() && max > 0.0) {
        return max;
    }
    let histogram = Histogram::of(x, e, max);
    let total: f64 = histogram.total_squares;
    let need = total - allowed;
    let mut best_reaching: Option<(usize, f32)> = None;
    let mut best_removing = (f64::NEG_INFINITY, max);
    let (mut count, mut sum) = (0usize, 0f64);
    for bin in 0..BINS {
        // Elements in bins 0..=bin are those above this bin's lower
        // threshold `t`, which the candidate `M = 2t` moves.
        count += histogram.count[bin];
        sum += histogram.sum[bin];
        let m = 2.0 * histogram.threshold(bin);
        let m64 = f64::from(m);
        let removed = 2.0 * m64 * sum - m64 * m64 * count as f64;
        if bin < REACHING
            && removed >= need
            && best_reaching.is_none_or(|(fewest, _)| count < fewest)
        {
            best_reaching = Some((count, m));
        }
        if removed > best_removing.0 {
            best_removing = (removed, m);
        }
    }
    best_reaching.map_or(best_removing.1, |(_, m)| m)
}

/// Counts and magnitude sums of `|acc|` by bin: bin `k` holds the elements
/// with `threshold(k) <= |a| < threshold(k − 1)`, bin 0 those from
/// `threshold(0) = max / 2` up (the threshold of 3LC's own `M = max`).
struct Histogram {
    count: [usize; BINS],
    sum: [f64; BINS],
    total_squares: f64,
    max: f32,
}

impl Histogram {
    fn of(x: &[f32], e: Option<&[f32]>, max: f32) -> Histogram {
        let mut h = Histogram {
            count: [0; BINS],
            sum: [0.0; BINS],
            total_squares: 0.0,
            max,
        };
        // Independent lanes, merged at the end, so that consecutive
        // elements do not wait on each other's f64 adds: encode_pass of
        // 4M values 11.4 ms with one lane, 9.9 ms with four (`cargo bench
        // -p tlc-codec --bench codecs -- 3lc_s1/`). Chunks rather than
        // `i % LANES` over one iterator of `acc`, which measured 11.3 ms.
        let mut lanes = [Lane::default(); LANES];
        let half = max * 0.5;
        let add = |lane: &mut Lane, a: f32| {
            let a = a.abs();
            lane.squares += f64::from(a) * f64::from(a);
            let slot = slot(a, half);
            lane.count[slot] += 1;
            lane.sum[slot] += f64::from(a);
        };
        match e {
            Some(e) => {
                let (xs, es) = (x.chunks_exact(LANES), e.chunks_exact(LANES));
                let (x_rest, e_rest) = (xs.remainder(), es.remainder());
                for (xc, ec) in xs.zip(es) {
                    for (k, lane) in lanes.iter_mut().enumerate() {
                        add(lane, xc[k] + ec[k]);
                    }
                }
                for (x, e) in x_rest.iter().zip(e_rest) {
                    add(&mut lanes[0], x + e);
                }
            }
            None => {
                let xs = x.chunks_exact(LANES);
                let rest = xs.remainder();
                for xc in xs {
                    for (k, lane) in lanes.iter_mut().enumerate() {
                        add(lane, xc[k]);
                    }
                }
                for &x in rest {
                    add(&mut lanes[0], x);
                }
            }
        }
        for lane in &lanes {
            h.total_squares += lane.squares;
            for bin in 0..BINS {
                h.count[bin] += lane.count[bin];
                h.sum[bin] += lane.sum[bin];
            }
        }
        h
    }

    /// The lower edge of bin `k`: `max / 2` times the `k`-th float below
    /// 1.0 that has only two mantissa bits (1.75, 1.5, 1.25, 1.0 times a
    /// power of two: four candidates per octave).
    fn threshold(&self, k: usize) -> f32 {
        self.max * 0.5 * f32::from_bits((ONE_KEY - k as u32) << KEY_SHIFT)
    }
}

/// The bin of `|a|` against `half = max / 2`, read from the bits of
/// `a / half`: its exponent and two top mantissa bits. At or above `half`
/// the key reaches ONE_KEY and the bin is 0; below the last bin, the spare
/// slot `BINS`. Without branches: the bins of noisy data are unpredictable
/// (with branches the histogram took 8x an encode).
fn slot(a: f32, half: f32) -> usize {
    let key = (a / half).to_bits() >> KEY_SHIFT;
    (ONE_KEY.saturating_sub(key) as usize).min(BINS)
}

/// Independent accumulators in [`Histogram::of`].
const LANES: usize = 4;

/// One lane's share of a histogram, with a spare last slot for the
/// elements below every bin.
#[derive(Clone, Copy)]
struct Lane {
    count: [usize; BINS + 1],
    sum: [f64; BINS + 1],
    squares: f64,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            count: [0; BINS + 1],
            sum: [0.0; BINS + 1],
            squares: 0.0,
        }
    }
}

/// Bits below the two top mantissa bits of an f32.
const KEY_SHIFT: u32 = 21;
/// `1.0f32`'s exponent and two top mantissa bits.
const ONE_KEY: u32 = 0x3f80_0000 >> KEY_SHIFT;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::quantize_pack;

    fn laplace(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                (-u.signum() * (1.0 - 2.0 * u.abs()).max(1e-12).ln()) as f32
            })
            .collect()
    }

    fn squares(v: &[f32]) -> f64 {
        v.iter().map(|&a| f64::from(a) * f64::from(a)).sum()
    }

    fn max_abs(v: &[f32]) -> f32 {
        v.iter().fold(0f32, |m, a| m.max(a.abs()))
    }

    /// One pass at `m`: the squared error left and the nonzero trits.
    fn pass(acc: &[f32], m: f32) -> (f64, usize) {
        let mut e = acc.to_vec();
        let zeros = vec![0f32; acc.len()];
        let mut out = vec![0u8; acc.len().div_ceil(5)];
        quantize_pack(&zeros, Some(&mut e), m, &mut out);
        let moved = e.iter().zip(acc).filter(|(e, a)| e != a).count();
        (squares(&e), moved)
    }

    #[test]
    fn the_histogram_predicts_what_the_pass_removes() {
        let acc = laplace(20_000, 3);
        let max = max_abs(&acc);
        let h = Histogram::of(&acc, None, max);
        let (mut count, mut sum) = (0, 0.0);
        for k in 0..BINS {
            count += h.count[k];
            sum += h.sum[k];
            let m = 2.0 * h.threshold(k);
            let (left, moved) = pass(&acc, m);
            let predicted =
                h.total_squares - (2.0 * f64::from(m) * sum - f64::from(m).powi(2) * count as f64);
            assert_eq!(moved, count, "bin {k}");
            assert!(
                (left - predicted).abs() <= 1e-6 * h.total_squares,
                "bin {k}: {left} vs {predicted}"
            );
        }
    }

    #[test]
    fn a_reachable_goal_is_reached_with_fewer_trits_than_the_best_removal() {
        let acc = laplace(20_000, 5);
        let max = max_abs(&acc);
        let total = squares(&acc);
        // 98% of the error may stay: reachable in one pass (a Laplace
        // tensor has few elements above max / 4).
        let allowed = total * 0.98;
        let m = scale_toward(&acc, None, max, allowed);
        let (left, moved) = pass(&acc, m);
        assert!(left <= allowed * (1.0 + 1e-6), "{left} > {allowed}");
        // The pass that removes the most moves more elements.
        let greedy = scale_toward(&acc, None, max, 0.0);
        let (greedy_left, greedy_moved) = pass(&acc, greedy);
        assert!(greedy_left < left);
        assert!(moved < greedy_moved, "{moved} vs {greedy_moved}");
    }

    #[test]
    fn an_unreachable_goal_removes_more_than_3lcs_own_scale() {
        let acc = laplace(20_000, 7);
        let max = max_abs(&acc);
        let m = scale_toward(&acc, None, max, 0.0);
        assert!(m < max);
        assert!(pass(&acc, m).0 < pass(&acc, max).0);
    }

    #[test]
    fn a_pass_that_reaches_the_goal_leaves_no_element_more_than_half_the_largest() {
        // One outlier and a bulk just under a quarter of it. Removing the
        // most error would take M near the bulk and clamp the outlier; a
        // goal that sending the outlier alone reaches must not do that.
        let mut acc = vec![0.24f32; 1000];
        acc[0] = 1.0;
        let total = squares(&acc);
        let m = scale_toward(&acc, None, 1.0, total - 0.9);
        assert!(m >= 0.5, "{m}");
        let mut e = acc.clone();
        let mut out = vec![0u8; 200];
        quantize_pack(&[0.0; 1000], Some(&mut e), m, &mut out);
        assert!(max_abs(&e) <= 0.5, "{}", max_abs(&e));
        // A goal out of one pass's reach: the most removed, however low.
        let greedy = scale_toward(&acc, None, 1.0, 0.0);
        assert!(greedy < 0.5, "{greedy}");
    }

    #[test]
    fn the_error_buffer_is_part_of_what_is_refined() {
        let x = laplace(5_000, 11);
        let e = laplace(5_000, 13);
        let acc: Vec<f32> = x.iter().zip(&e).map(|(x, e)| x + e).collect();
        let max = max_abs(&acc);
        let allowed = squares(&acc) * 0.3;
        assert_eq!(
            scale_toward(&x, Some(&e), max, allowed),
            scale_toward(&acc, None, max, allowed)
        );
    }

    #[test]
    fn degenerate_tensors_keep_their_max() {
        assert_eq!(scale_toward(&[0.0; 4], None, 0.0, 0.0), 0.0);
        assert!(scale_toward(&[1.0], None, f32::NAN, 0.0).is_nan());
        // A single element: M = |a| removes it all.
        assert_eq!(scale_toward(&[-2.0], None, 2.0, 0.0), 2.0);
    }

    #[test]
    fn every_bin_is_bounded_by_its_thresholds() {
        let h = Histogram::of(&[], None, 3.0);
        for i in 1..10_000 {
            let a = 3.0 * i as f32 / 10_000.0;
            match slot(a, 1.5) {
                BINS => assert!(a < h.threshold(BINS - 1), "{a} dropped"),
                k => {
                    assert!(a >= h.threshold(k), "{a} in bin {k}");
                    assert!(k == 0 || a < h.threshold(k - 1), "{a} in bin {k}");
                }
            }
        }
        assert_eq!(slot(0.0, 1.5), BINS);
        assert_eq!(slot(3.0, 1.5), 0);
    }
}
