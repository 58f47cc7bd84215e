//! One bit per tensor value, least significant bit first, as used by the
//! 1-bit and top-k codecs.

use crate::error::DecodeError;

/// Bytes of a bitmap for `n` values.
pub fn len(n: usize) -> usize {
    n.div_ceil(8)
}

/// Packs `bit(i)` for `i < n` into `out` (exactly `len(n)` bytes); pad bits are zero.
pub fn pack(n: usize, out: &mut [u8], mut bit: impl FnMut(usize) -> bool) {
    debug_assert_eq!(out.len(), len(n));
    for (byte_index, byte) in out.iter_mut().enumerate() {
        let base = byte_index * 8;
        let mut b = 0u8;
        for k in 0..8.min(n - base) {
            b |= u8::from(bit(base + k)) << k;
        }
        *byte = b;
    }
}

/// Checks a bitmap for `n` values (exactly `len(n)` bytes, pad bits zero)
/// and returns how many bits are set.
pub fn check(n: usize, bits: &[u8]) -> Result<u64, DecodeError> {
    if bits.len() != len(n) {
        return Err(DecodeError::CorruptPayload(
            "bitmap length does not match tensor",
        ));
    }
    if n % 8 != 0 {
        if let Some(&last) = bits.last() {
            if last >> (n % 8) != 0 {
                return Err(DecodeError::CorruptPayload("bitmap padding bits set"));
            }
        }
    }
    Ok(bits.iter().map(|b| u64::from(b.count_ones())).sum())
}

/// Whether bit `i` is set.
#[inline(always)]
pub fn get(bits: &[u8], i: usize) -> bool {
    bits[i / 8] >> (i % 8) & 1 == 1
}
