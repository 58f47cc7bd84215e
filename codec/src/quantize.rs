//! 3LC steps 1–5 fused into two passes over the tensor.
//!
//! Pass one finds `max|e + x|`; pass two quantizes `acc = e + x` to trits,
//! writes the residual `acc - M*q` back into `e` and packs the trits into
//! quartic bytes. `acc` is computed in both passes rather than stored, so the
//! error buffer is untouched when pass one rejects the tensor (a NaN, say) and
//! no second tensor-sized buffer is needed. Pass one is also every codec's
//! `max|acc|` (through `feedback::Accumulator`).
//!
//! Both passes are written so LLVM vectorizes them, then compiled twice: for
//! the baseline target and, on x86-64, for AVX2 chosen at run time. The
//! arithmetic is the same IEEE operations in the same order (Rust never
//! contracts `a*b + c` into an FMA), so both give the same bytes.

use crate::quartic::Layout;

/// Result of pass one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxAbs {
    /// `max|acc|` over the tensor.
    pub max: f32,
    /// Whether every `acc` is finite.
    pub finite: bool,
}

/// Pass one: `max|e + x|` (`max|x|` when `e` is `None`).
pub fn max_abs(x: &[f32], e: Option<&[f32]>) -> MaxAbs {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above; the function
        // has no other precondition.
        return unsafe { avx2::max_abs(x, e) };
    }
    portable::max_abs(x, e)
}

/// Pass two: quantizes with scale `m` (finite), writes residuals into `e`
/// if present, and fills `out` with `ceil(n/5)` quartic bytes. With
/// `m >= max|acc|` (3LC's own scale) every trit is `round(acc / m)`; a
/// smaller `m` (a refinement pass) clamps the trits of larger elements to
/// ±1 and leaves the rest of them in `e`.
pub fn quantize_pack(x: &[f32], e: Option<&mut [f32]>, m: f32, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above; the function
        // has no other precondition.
        return unsafe { avx2::quantize_pack(x, e, m, out) };
    }
    portable::quantize_pack(x, e, m, out)
}

/// The kernels, generic over whether error feedback is on so each variant
/// compiles to a loop without branches. Instantiated by `portable` and `avx2`.
mod kernel {
    use super::*;

    const LANES: usize = 16;

    #[inline(always)]
    pub fn max_abs<const FEEDBACK: bool>(x: &[f32], e: &[f32]) -> MaxAbs {
        let mut max = [0f32; LANES];
        let mut finite = [true; LANES];
        // Without feedback `e` is empty and never read.
        let e_or_x = if FEEDBACK { e } else { x };
        let mut xs = x.chunks_exact(LANES);
        let mut es = e_or_x.chunks_exact(LANES);
        for (xc, ec) in (&mut xs).zip(&mut es) {
            for k in 0..LANES {
                let a = if FEEDBACK { xc[k] + ec[k] } else { xc[k] }.abs();
                max[k] = if a > max[k] { a } else { max[k] };
                finite[k] &= a <= f32::MAX;
            }
        }
        for (k, (&xv, &ev)) in xs.remainder().iter().zip(es.remainder()).enumerate() {
            let a = if FEEDBACK { xv + ev } else { xv }.abs();
            max[k] = if a > max[k] { a } else { max[k] };
            finite[k] &= a <= f32::MAX;
        }
        MaxAbs {
            max: max.into_iter().fold(0.0, |m, a| if a > m { a } else { m }),
            finite: finite.into_iter().all(|f| f),
        }
    }

    /// The trit of one value, updating its residual under feedback.
    #[inline(always)]
    fn trit<const FEEDBACK: bool>(x: f32, e: &mut f32, m: f32) -> i32 {
        let acc = if FEEDBACK { x + *e } else { x };
        let v = acc / m;
        // round_ties_even(v) for |v| <= 1: exactly 0.5 goes to the even 0;
        // beyond 1 the trit clamps to ±1.
        let q = (v > 0.5) as i32 - (v < -0.5) as i32;
        if FEEDBACK {
            *e = acc - m * q as f32;
        }
        q
    }

    #[inline(always)]
    pub fn quantize_pack<const FEEDBACK: bool>(x: &[f32], e: &mut [f32], m: f32, out: &mut [u8]) {
        let layout = Layout::new(x.len());
        let Layout { n, len, full } = layout;
        debug_assert_eq!(out.len(), len);

        // The byte-parallel part: five partitions of `full` values each.
        // With `full == 0` the later partitions may start past the end.
        let part = |j: usize| x.get(j * len..j * len + full).unwrap_or_default();
        let (x0, x1, x2, x3, x4) = (part(0), part(1), part(2), part(3), part(4));
        // Without feedback the residual slices stay empty and are never touched.
        let [e0, e1, e2, e3, e4]: [&mut [f32]; 5] = if FEEDBACK {
            let mut chunks = e.chunks_mut(len.max(1)).map(|c| &mut c[..full]);
            std::array::from_fn(|_| chunks.next().unwrap_or_default())
        } else {
            Default::default()
        };
        let out_full = &mut out[..full];
        let mut unused = 0f32;
        for i in 0..full {
            let mut q = |xj: &[f32], ej: &mut [f32]| {
                let residual = if FEEDBACK { &mut ej[i] } else { &mut unused };
                trit::<FEEDBACK>(xj[i], residual, m)
            };
            let b =
                121 + 81 * q(x0, e0) + 27 * q(x1, e1) + 9 * q(x2, e2) + 3 * q(x3, e3) + q(x4, e4);
            out_full[i] = b as u8;
        }

        // The tail: bytes that reach into the padding.
        for (i, byte) in out.iter_mut().enumerate().skip(full) {
            let mut b = 121i32;
            for (j, w) in [81, 27, 9, 3, 1].into_iter().enumerate() {
                let at = j * len + i;
                if at < n {
                    let residual = if FEEDBACK { &mut e[at] } else { &mut unused };
                    b += w * trit::<FEEDBACK>(x[at], residual, m);
                }
            }
            *byte = b as u8;
        }
    }
}

/// Compiled for the build's baseline target.
mod portable {
    use super::*;

    pub fn max_abs(x: &[f32], e: Option<&[f32]>) -> MaxAbs {
        match e {
            Some(e) => kernel::max_abs::<true>(x, e),
            None => kernel::max_abs::<false>(x, &[]),
        }
    }

    pub fn quantize_pack(x: &[f32], e: Option<&mut [f32]>, m: f32, out: &mut [u8]) {
        match e {
            Some(e) => kernel::quantize_pack::<true>(x, e, m, out),
            None => kernel::quantize_pack::<false>(x, &mut [], m, out),
        }
    }
}

/// Compiled with AVX2 enabled; call only after checking the CPU has it.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    #[target_feature(enable = "avx2")]
    pub unsafe fn max_abs(x: &[f32], e: Option<&[f32]>) -> MaxAbs {
        match e {
            Some(e) => kernel::max_abs::<true>(x, e),
            None => kernel::max_abs::<false>(x, &[]),
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize_pack(x: &[f32], e: Option<&mut [f32]>, m: f32, out: &mut [u8]) {
        match e {
            Some(e) => kernel::quantize_pack::<true>(x, e, m, out),
            None => kernel::quantize_pack::<false>(x, &mut [], m, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state as f32 / u32::MAX as f32 - 0.5) * 0.01
            })
            .collect()
    }

    /// The dispatched (AVX2 where available) and portable kernels agree to
    /// the bit, with and without feedback, across layouts with padding.
    #[test]
    fn dispatched_kernels_match_portable() {
        for n in [0, 1, 4, 5, 6, 79, 80, 81, 1000, 4099] {
            let x = sample(n, n as u32);
            let e_start = sample(n, 7 + n as u32);
            let m = max_abs(&x, Some(&e_start));
            assert_eq!(m, portable::max_abs(&x, Some(&e_start)));
            assert!(m.finite);
            let scale = m.max * 1.3;
            let len = n.div_ceil(5);
            let (mut e_fast, mut e_port) = (e_start.clone(), e_start.clone());
            let (mut out_fast, mut out_port) = (vec![0u8; len], vec![0u8; len]);
            quantize_pack(&x, Some(&mut e_fast), scale, &mut out_fast);
            portable::quantize_pack(&x, Some(&mut e_port), scale, &mut out_port);
            assert_eq!(out_fast, out_port, "n = {n}");
            assert_eq!(
                e_fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                e_port.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            quantize_pack(&x, None, scale, &mut out_fast);
            portable::quantize_pack(&x, None, scale, &mut out_port);
            assert_eq!(out_fast, out_port, "n = {n}, no feedback");
        }
    }

    #[test]
    fn max_abs_sees_non_finite() {
        let mut x = sample(100, 3);
        assert!(max_abs(&x, None).finite);
        x[37] = f32::NAN;
        assert!(!max_abs(&x, None).finite);
        x[37] = f32::NEG_INFINITY;
        assert!(!max_abs(&x, None).finite);
        let e = vec![f32::MAX; 100];
        x[37] = f32::MAX;
        assert!(!max_abs(&x, Some(&e)).finite, "overflow in e + x");
    }
}
