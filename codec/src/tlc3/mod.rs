//! 3LC: 3-value quantization with a sparsity multiplier, quartic encoding
//! and zero-run encoding (Lim, Andersen, Kaminsky, SysML 2019), exactly as
//! `docs/DESIGN.md` specifies it.

pub mod toward;
pub mod zero_run;

// The quantize-and-pack kernels and quartic encoding sit below `feedback`
// (whose `max|acc|` is pass one) and `terngrad` (which packs quartic bytes
// too); re-exported so `tlc3::quantize` and `tlc3::quartic` still name them.
pub use crate::{quantize, quartic};

use crate::codec::Sparsity;
use crate::error::{DecodeError, EncodeError};
use crate::feedback::Accumulator;
use crate::params::Params;
use crate::quartic::Unpacker;

/// How a pass picks its scale `M`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// `M = max|acc| * s`: 3LC as the paper and DESIGN define it.
    Sparsity(Sparsity),
    /// A refinement pass over what earlier passes left: the `M` that leaves
    /// at most this much squared L2 error with the fewest nonzero trits,
    /// or removes the most when no `M` reaches it ([`toward`]). Elements
    /// above `M` clamp to one trit and keep the rest in the error.
    Toward {
        /// `Σ (acc − M q)²` the pass may leave.
        allowed_squared_error: f64,
    },
}

/// Encodes `x` (through the error buffer `e`, if given) and appends the
/// zero-run-encoded payload to `out`. On error neither `e` nor `out` is changed.
pub fn encode(
    x: &[f32],
    mut e: Option<&mut [f32]>,
    scale: Scale,
    out: &mut Vec<u8>,
) -> Result<Params, EncodeError> {
    let quantize::MaxAbs { max, finite } = quantize::max_abs(x, e.as_deref());
    if !finite {
        return Err(EncodeError::NonFinite);
    }
    let (scale, sparsity) = match scale {
        Scale::Sparsity(sparsity) => (max * sparsity.get(), sparsity),
        Scale::Toward {
            allowed_squared_error,
        } => (
            toward::scale_toward(x, e.as_deref(), max, allowed_squared_error),
            // Informational only; a refinement has no multiplier.
            Sparsity::ONE,
        ),
    };
    if !scale.is_finite() {
        // max|acc| * s overflowed f32: the scale cannot be sent.
        let (index, value) = Accumulator::new(x, e.as_deref_mut()).find_magnitude(max);
        return Err(EncodeError::OutOfRange {
            codec: "3lc",
            value,
            index,
        });
    }
    let start = out.len();
    let len = x.len().div_ceil(5);
    out.resize(start + len, 0);
    quantize::quantize_pack(x, e, scale, &mut out[start..]);
    let encoded = zero_run::encode_in_place(&mut out[start..]);
    out.truncate(start + encoded);
    Ok(Params::ThreeLc {
        scale,
        sparsity: sparsity.get(),
    })
}

/// Decodes a payload into `out` (all `n` values): expands zero runs and
/// quartic bytes in one pass, `x' = M * q`.
pub fn decode(scale: f32, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    let mut unpacker = Unpacker::new(out, [-scale, 0.0, scale]);
    let len = unpacker.layout().len;
    let mut i = 0;
    for &byte in payload {
        let k = zero_run::expanded_len(byte);
        if k > len - i {
            return Err(DecodeError::CorruptPayload(
                "zero runs expand past the tensor",
            ));
        }
        if byte >= zero_run::FIRST_RUN_BYTE {
            unpacker.put_zeros(i, k);
        } else {
            unpacker.put(i, byte)?;
        }
        i += k;
    }
    if i != len {
        return Err(DecodeError::CorruptPayload(
            "zero runs expand short of the tensor",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's steps written out one by one, as plainly as
    /// possible, to check the fused kernels against.
    fn reference(x: &[f32], e: &mut [f32], s: f32) -> (f32, Vec<u8>) {
        let n = x.len();
        let acc: Vec<f32> = e.iter().zip(x).map(|(e, x)| e + x).collect();
        let max = acc.iter().fold(0f32, |m, a| m.max(a.abs()));
        let m = max * s;
        let q: Vec<i32> = acc
            .iter()
            .map(|a| {
                if m == 0.0 {
                    0
                } else {
                    (a / m).round_ties_even() as i32
                }
            })
            .collect();
        for i in 0..n {
            e[i] = acc[i] - m * q[i] as f32;
        }
        let l = n.div_ceil(5);
        let mut t: Vec<u8> = q.iter().map(|q| (q + 1) as u8).collect();
        t.resize(5 * l, 1);
        let bytes: Vec<u8> = (0..l)
            .map(|i| 81 * t[i] + 27 * t[l + i] + 9 * t[2 * l + i] + 3 * t[3 * l + i] + t[4 * l + i])
            .collect();
        let mut z = Vec::new();
        let mut i = 0;
        while i < l {
            if bytes[i] != 121 {
                z.push(bytes[i]);
                i += 1;
                continue;
            }
            let mut k = 0;
            while i + k < l && bytes[i + k] == 121 {
                k += 1;
            }
            i += k;
            while k >= 14 {
                z.push(255);
                k -= 14;
            }
            if k == 1 {
                z.push(121);
            } else if k >= 2 {
                z.push(243 + (k as u8 - 2));
            }
        }
        (m, z)
    }

    fn gradient_like(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 40) as f32 / (1u64 << 24) as f32;
                // Heavy-tailed: cube of a centred uniform.
                let c = u - 0.5;
                c * c * c * 0.01
            })
            .collect()
    }

    #[test]
    fn matches_the_reference_steps() {
        for (n, s) in [(1, 1.0), (9, 1.5), (1000, 1.0), (1003, 1.75), (4096, 1.9)] {
            let mut e_ref = vec![0f32; n];
            let mut e = vec![0f32; n];
            for step in 0..5 {
                let x = gradient_like(n, step * 31 + n as u64);
                let (m_ref, bytes_ref) = reference(&x, &mut e_ref, s);
                let mut out = Vec::new();
                let params = encode(
                    &x,
                    Some(&mut e),
                    Scale::Sparsity(Sparsity::new(s).unwrap()),
                    &mut out,
                )
                .unwrap();
                assert_eq!(
                    params,
                    Params::ThreeLc {
                        scale: m_ref,
                        sparsity: s
                    }
                );
                assert_eq!(out, bytes_ref, "n={n} s={s} step={step}");
                assert_eq!(e, e_ref);
                let mut back = vec![0f32; n];
                decode(m_ref, &out, &mut back).unwrap();
                assert!(back.iter().all(|b| *b == 0.0 || b.abs() == m_ref));
            }
        }
    }

    #[test]
    fn all_zero_tensor_is_runs_only() {
        let x = vec![0f32; 700];
        let mut out = Vec::new();
        let p = encode(&x, None, Scale::Sparsity(Sparsity::ONE), &mut out).unwrap();
        assert_eq!(
            p,
            Params::ThreeLc {
                scale: 0.0,
                sparsity: 1.0
            }
        );
        assert_eq!(out, vec![255; 10]);
        let mut back = vec![1f32; 700];
        decode(0.0, &out, &mut back).unwrap();
        assert!(back.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn ties_round_to_even_zero() {
        // max = 1, s = 1: 0.5 is a tie and goes to 0; just above goes to 1.
        let x = [1.0, 0.5, -0.5, 0.500_000_06, -1.0];
        let mut e = [0f32; 5];
        let mut out = Vec::new();
        encode(&x, Some(&mut e), Scale::Sparsity(Sparsity::ONE), &mut out).unwrap();
        let mut back = [0f32; 5];
        decode(1.0, &out, &mut back).unwrap();
        assert_eq!(back, [1.0, 0.0, 0.0, 1.0, -1.0]);
        assert_eq!(e, [0.0, 0.5, -0.5, 0.500_000_06 - 1.0, 0.0]);
    }

    #[test]
    fn non_finite_leaves_buffer_alone() {
        let x = [1.0, f32::NAN, 2.0];
        let mut e = [0.25f32; 3];
        let mut out = vec![7u8];
        assert_eq!(
            encode(&x, Some(&mut e), Scale::Sparsity(Sparsity::ONE), &mut out),
            Err(EncodeError::NonFinite)
        );
        assert_eq!(e, [0.25; 3]);
        assert_eq!(out, vec![7]);
        let huge = [f32::MAX, 1.0];
        assert!(matches!(
            encode(
                &huge,
                None,
                Scale::Sparsity(Sparsity::new(1.5).unwrap()),
                &mut out
            ),
            Err(EncodeError::OutOfRange { .. })
        ));
    }

    #[test]
    fn hostile_payloads_are_errors() {
        let mut out = vec![0f32; 10]; // L = 2
        assert!(decode(1.0, &[121, 121], &mut out).is_ok());
        assert!(decode(1.0, &[243], &mut out).is_ok());
        assert!(decode(1.0, &[244], &mut out).is_err(), "run of 3 > L");
        assert!(decode(1.0, &[121], &mut out).is_err(), "short");
        assert!(decode(1.0, &[121, 121, 121], &mut out).is_err(), "long");
        assert!(decode(1.0, &[], &mut out).is_err());
        let mut none: [f32; 0] = [];
        assert!(decode(1.0, &[], &mut none).is_ok());
        assert!(decode(1.0, &[255], &mut none).is_err());
    }
}
