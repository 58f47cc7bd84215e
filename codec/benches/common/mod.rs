//! What the codec benchmarks share.

/// Uniform values in (0, 1) from a xorshift generator seeded with `seed`:
/// the randomness every benchmark's gradient-like data is drawn from, the
/// same from run to run.
pub fn uniform(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
}
