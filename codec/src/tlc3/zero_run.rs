//! Zero-run encoding (3LC step 6): runs of the quartic byte 121 (five
//! zeros) become one byte 243..=255 standing for 2..=14 of them.

/// The quartic byte of five zero trits.
pub const ZERO_GROUP: u8 = 121;
/// The first run byte: 243 stands for a run of two 121s.
pub const FIRST_RUN_BYTE: u8 = 243;
/// The longest run one byte can stand for.
pub const MAX_RUN: usize = 14;

/// How many quartic bytes a byte of zero-run-encoded data stands for.
#[inline(always)]
pub fn expanded_len(byte: u8) -> usize {
    if byte >= FIRST_RUN_BYTE {
        usize::from(byte - FIRST_RUN_BYTE) + 2
    } else {
        1
    }
}

/// Zero-run-encodes `buf` in place and returns the encoded length; the
/// encoded bytes are `buf[..len]`. Runs longer than 14 are cut greedily
/// into pieces of 14 from the front; a single leftover 121 stays 121.
///
/// In place is safe because the encoding never grows: the write position
/// never passes the read position.
pub fn encode_in_place(buf: &mut [u8]) -> usize {
    let len = buf.len();
    let mut read = 0;
    let mut write = 0;
    while read < len {
        let byte = buf[read];
        if byte != ZERO_GROUP {
            buf[write] = byte;
            write += 1;
            read += 1;
            continue;
        }
        let run = buf[read..].iter().take_while(|&&b| b == ZERO_GROUP).count();
        read += run;
        let mut left = run;
        while left >= MAX_RUN {
            buf[write] = run_byte(MAX_RUN);
            write += 1;
            left -= MAX_RUN;
        }
        match left {
            0 => {}
            1 => {
                buf[write] = ZERO_GROUP;
                write += 1;
            }
            k => {
                buf[write] = run_byte(k);
                write += 1;
            }
        }
    }
    write
}

/// The byte for a run of `k` zero groups, `2 <= k <= 14`.
#[inline(always)]
fn run_byte(k: usize) -> u8 {
    debug_assert!((2..=MAX_RUN).contains(&k));
    FIRST_RUN_BYTE + (k - 2) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(bytes: &[u8]) -> Vec<u8> {
        let mut buf = bytes.to_vec();
        let len = encode_in_place(&mut buf);
        buf.truncate(len);
        buf
    }

    fn expand(encoded: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in encoded {
            if b >= FIRST_RUN_BYTE {
                out.extend(std::iter::repeat_n(ZERO_GROUP, expanded_len(b)));
            } else {
                out.push(b);
            }
        }
        out
    }

    fn zeros(k: usize) -> Vec<u8> {
        vec![ZERO_GROUP; k]
    }

    #[test]
    fn run_lengths_at_the_edges() {
        let cases: &[(usize, &[u8])] = &[
            (1, &[121]),
            (2, &[243]),
            (3, &[244]),
            (13, &[254]),
            (14, &[255]),
            (15, &[255, 121]),
            (16, &[255, 243]),
            (28, &[255, 255]),
            (29, &[255, 255, 121]),
            (30, &[255, 255, 243]),
        ];
        for &(k, want) in cases {
            let got = encode(&zeros(k));
            assert_eq!(got, want, "run of {k}");
            assert_eq!(expand(&got), zeros(k), "run of {k} expands back");
        }
    }

    #[test]
    fn runs_between_other_bytes() {
        let mut input = vec![0u8, 242];
        input.extend(zeros(15));
        input.push(7);
        input.extend(zeros(1));
        input.push(120);
        input.extend(zeros(2));
        let got = encode(&input);
        assert_eq!(got, vec![0, 242, 255, 121, 7, 121, 120, 243]);
        assert_eq!(expand(&got), input);
    }

    #[test]
    fn no_zeros_is_unchanged_and_all_zeros_shrink() {
        let dense: Vec<u8> = (0..=242u8).filter(|&b| b != ZERO_GROUP).collect();
        assert_eq!(encode(&dense), dense);
        let all = zeros(1000);
        let got = encode(&all);
        assert_eq!(got.len(), 1000usize.div_ceil(14));
        assert_eq!(expand(&got), all);
        assert!(encode(&[]).is_empty());
    }
}
