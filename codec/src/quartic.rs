//! Quartic encoding (3LC step 5): five trits in one byte, `3^5 = 243 <= 256`.
//!
//! The tensor of `n` trits is padded with the zero trit to `5L`,
//! `L = ceil(n / 5)`, and cut into five contiguous partitions of `L`; byte
//! `i` holds digit `j` of partition `j` at position `i`, most significant
//! first: `b[i] = 81*p0[i] + 27*p1[i] + 9*p2[i] + 3*p3[i] + p4[i]`. Taking
//! the five digits from far-apart partitions (rather than five neighbours)
//! lets the encoder and decoder work on five contiguous streams at once.
//! Used by 3LC and, without zero-run encoding, by TernGrad.

use crate::error::DecodeError;

/// Weight of partition `j`'s digit in a byte.
pub const WEIGHTS: [u8; 5] = [81, 27, 9, 3, 1];
/// The largest valid quartic byte (`2*81 + 2*27 + 2*9 + 2*3 + 2`).
pub const MAX_BYTE: u8 = 242;
/// The digit of the zero trit (a trit `q` in {-1, 0, 1} is stored as `q + 1`).
pub const ZERO_DIGIT: u8 = 1;

/// Where the five partitions of a tensor of `n` trits lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Number of trits (tensor values).
    pub n: usize,
    /// Partition length and number of quartic bytes: `ceil(n / 5)`.
    pub len: usize,
    /// Number of leading bytes whose five positions all lie inside the
    /// tensor; bytes from here on touch padding.
    pub full: usize,
}

impl Layout {
    /// The layout for `n` values.
    pub fn new(n: usize) -> Layout {
        let len = n.div_ceil(5);
        Layout {
            n,
            len,
            full: n.saturating_sub(4 * len),
        }
    }

    /// Tensor position of partition `j`'s digit in byte `i`, if inside the tensor.
    #[inline(always)]
    pub fn position(&self, j: usize, i: usize) -> Option<usize> {
        let at = j * self.len + i;
        (at < self.n).then_some(at)
    }
}

/// The five digits of every valid quartic byte.
pub const DIGITS: [[u8; 5]; 243] = {
    let mut table = [[0u8; 5]; 243];
    let mut b = 0;
    while b < 243 {
        let mut j = 0;
        while j < 5 {
            table[b][j] = ((b / WEIGHTS[j] as usize) % 3) as u8;
            j += 1;
        }
        b += 1;
    }
    table
};

/// Packs trits into quartic bytes: `trit(position)` gives the trit in
/// {-1, 0, 1} for a tensor position; padding gets the zero trit.
/// Scalar and general; the 3LC encoder has its own fused, vectorized loop.
pub fn pack(layout: Layout, out: &mut [u8], mut trit: impl FnMut(usize) -> i8) {
    debug_assert_eq!(out.len(), layout.len);
    for (i, byte) in out.iter_mut().enumerate() {
        let mut b = 0u8;
        for (j, w) in WEIGHTS.iter().enumerate() {
            let digit = match layout.position(j, i) {
                Some(at) => (trit(at) + 1) as u8,
                None => ZERO_DIGIT,
            };
            b += w * digit;
        }
        *byte = b;
    }
}

/// Writes decoded quartic bytes into a tensor, given the value of each digit.
pub struct Unpacker<'a> {
    out: &'a mut [f32],
    layout: Layout,
    /// For each byte, its five values (`digit_values[digit]` per partition).
    table: Box<[[f32; 5]; 243]>,
    zero: f32,
}

impl<'a> Unpacker<'a> {
    /// An unpacker into `out` (all `n` values) where digit `d` decodes to
    /// `digit_values[d]`.
    pub fn new(out: &'a mut [f32], digit_values: [f32; 3]) -> Unpacker<'a> {
        let layout = Layout::new(out.len());
        let mut table = Box::new([[0f32; 5]; 243]);
        for (row, digits) in table.iter_mut().zip(DIGITS.iter()) {
            for (v, &d) in row.iter_mut().zip(digits) {
                *v = digit_values[usize::from(d)];
            }
        }
        Unpacker {
            out,
            layout,
            table,
            zero: digit_values[usize::from(ZERO_DIGIT)],
        }
    }

    /// The layout being filled.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Writes byte `b` (at most 242) at byte index `i < layout.len`.
    #[inline(always)]
    pub fn put(&mut self, i: usize, b: u8) -> Result<(), DecodeError> {
        let values = self
            .table
            .get(usize::from(b))
            .ok_or(DecodeError::CorruptPayload("quartic byte above 242"))?;
        let Layout { len, full, .. } = self.layout;
        if i < full {
            for (j, &v) in values.iter().enumerate() {
                self.out[j * len + i] = v;
            }
            return Ok(());
        }
        for (j, &v) in values.iter().enumerate() {
            match self.layout.position(j, i) {
                Some(at) => self.out[at] = v,
                None if DIGITS[usize::from(b)][j] != ZERO_DIGIT => {
                    return Err(DecodeError::CorruptPayload("non-zero digit in padding"));
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Writes `k` bytes of five zero trits starting at byte index `i`
    /// (`i + k <= layout.len`).
    #[inline(always)]
    pub fn put_zeros(&mut self, i: usize, k: usize) {
        let Layout { n, len, .. } = self.layout;
        for j in 0..5 {
            let start = (j * len + i).min(n);
            let end = (j * len + i + k).min(n);
            self.out[start..end].fill(self.zero);
        }
    }
}

/// Unpacks `bytes` (exactly `ceil(n / 5)` of them) into `out`.
pub fn unpack(bytes: &[u8], digit_values: [f32; 3], out: &mut [f32]) -> Result<(), DecodeError> {
    let mut unpacker = Unpacker::new(out, digit_values);
    if bytes.len() != unpacker.layout().len {
        return Err(DecodeError::CorruptPayload(
            "quartic length does not match tensor",
        ));
    }
    for (i, &b) in bytes.iter().enumerate() {
        unpacker.put(i, b)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_zeros_are_121_and_layout_is_partitioned() {
        assert_eq!(DIGITS[121], [1, 1, 1, 1, 1]);
        assert_eq!(DIGITS[242], [2, 2, 2, 2, 2]);
        // n = 7: L = 2, partitions [0,1] [2,3] [4,5] [6,pad] [pad,pad].
        let layout = Layout::new(7);
        assert_eq!((layout.len, layout.full), (2, 0));
        let trits = [1i8, -1, 0, 1, -1, -1, 1];
        let mut out = [0u8; 2];
        pack(layout, &mut out, |at| trits[at]);
        // byte 0: digits of positions 0,2,4,6,pad = 2,1,0,2,1
        // digits 2,1,0,2,1
        assert_eq!(out[0], 162 + 27 + 6 + 1);
        // byte 1: positions 1,3,5,pad,pad = 0,2,0,1,1
        assert_eq!(out[1], 2 * 27 + 3 + 1);
        let mut back = [9f32; 7];
        unpack(&out, [-1.0, 0.0, 1.0], &mut back).unwrap();
        assert_eq!(back, trits.map(f32::from));
    }

    #[test]
    fn padding_must_be_zero() {
        // n = 1: L = 1, partitions 1..4 are padding.
        let mut out = [0f32; 1];
        assert!(unpack(&[2 * 81 + 40], [-1.0, 0.0, 1.0], &mut out).is_ok());
        let err = unpack(&[2 * 81 + 41], [-1.0, 0.0, 1.0], &mut out).unwrap_err();
        assert_eq!(
            err,
            DecodeError::CorruptPayload("non-zero digit in padding")
        );
        assert!(unpack(&[243], [-1.0, 0.0, 1.0], &mut out).is_err());
    }
}
