//! Properties over generated inputs (proptest):
//!
//! - any finite tensor (subnormals, 1e30, all zeros, zero runs around
//!   multiples of 5 and 14) goes through every codec without a panic, and an
//!   encode error happens only when the input really is out of the codec's
//!   reach; what encodes decodes to the right length;
//! - the same encoder state gives the same bytes (TernGrad: the same seed);
//! - any bytes given to `Frame::parse` / `decode` never panic and never make
//!   the decoder allocate past the caller's limit (a counting allocator
//!   watches);
//! - flipping any byte of a valid frame, or cutting it short, is an error;
//! - hand-built 3LC payloads, with zero runs split in any valid way, decode
//!   to `M * q`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tlc_codec::{decode, Codec, EncodeError, Encoder, Feedback, Frame};

// --- a counting allocator, switched on per thread around a decode ---

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the allocator also runs while thread-locals are torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
            TOTAL.with(|t| t.set(t.get() + size));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping touches only const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the largest single allocation and
/// the total bytes allocated on this thread meanwhile.
fn counted<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|t| t.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    (r, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

/// What a decode under [`LIMITS`] may allocate: the output (4 bytes a
/// value, at most the limit) and a few kilobytes of tables and messages.
const ALLOCATION_BOUND: usize = 4 * (1 << 16) + 16 * 1024;

#[test]
fn the_allocation_counter_sees_a_decode_at_the_limit() {
    let (v, largest, _) = counted(|| vec![0u8; 1000]);
    assert_eq!((v.len(), largest), (1000, 1000));
    // The largest frame the limit allows: all zeros, 2^16 values.
    let n = LIMITS.max_elements;
    let payload = reference::zero_run(&vec![121; n.div_ceil(5) as usize]);
    let bytes = RawFrame::new(7, n, params2(0.0, 1.0), payload).bytes();
    let mut out = Vec::new();
    let (result, largest, total) = counted(|| decode(&bytes, &LIMITS, &mut out).is_ok());
    assert!(result);
    assert!(
        (4 * (1 << 16)..=ALLOCATION_BOUND).contains(&largest),
        "{largest}"
    );
    assert!(total <= 2 * ALLOCATION_BOUND, "{total}");
}

// --- strategies ---

/// One finite value: ordinary, any finite bit pattern, subnormal, huge, zero.
fn value() -> impl Strategy<Value = f32> {
    use proptest::num::f32 as f;
    prop_oneof![
        6 => -1e3f32..1e3,
        3 => f::NORMAL | f::SUBNORMAL | f::ZERO,
        2 => f::SUBNORMAL,
        1 => prop::sample::select(vec![
            1e30f32, -1e30, 3.4e38, -3.4e38, 65504.0, -65519.0, 65520.0, 7e4, 1e-30,
        ]),
        3 => Just(0.0f32),
        1 => Just(-0.0f32),
    ]
}

/// Run lengths around the quartic (5) and zero-run (14 bytes = 70 values) sizes.
const RUNS: &[usize] = &[
    1, 4, 5, 6, 9, 10, 11, 13, 14, 15, 27, 28, 29, 69, 70, 71, 74, 75, 76, 139, 140, 141, 350,
];

fn tensor() -> impl Strategy<Value = Vec<f32>> {
    let segment = prop_oneof![
        3 => prop::collection::vec(value(), 0..24),
        2 => (prop::sample::select(RUNS), any::<bool>())
            .prop_map(|(k, negative)| vec![if negative { -0.0 } else { 0.0 }; k]),
        1 => (prop::sample::select(RUNS), value()).prop_map(|(k, v)| vec![v; k]),
    ];
    prop_oneof![
        8 => prop::collection::vec(segment, 0..8).prop_map(|s| s.concat()),
        1 => (0usize..400).prop_map(|n| vec![0.0; n]),
    ]
}

fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::None),
        Just(Codec::Fp16),
        Just(Codec::Bf16),
        Just(Codec::Int8),
        any::<u64>().prop_map(|seed| Codec::TernGrad { seed }),
        Just(Codec::OneBit),
        (0.01f32..=100.0).prop_map(topk),
        (1.0f32..1.999).prop_map(threelc),
    ]
}

fn feedback() -> impl Strategy<Value = Feedback> {
    prop_oneof![Just(Feedback::On), Just(Feedback::Off)]
}

/// Checks that an encode error is one the input deserves.
fn check_error(codec: &Codec, acc: &[f32], err: &EncodeError) -> Result<(), TestCaseError> {
    let max = acc.iter().fold(0f32, |m, a| m.max(a.abs()));
    let all_finite = acc.iter().all(|a| a.is_finite());
    match err {
        EncodeError::NonFinite => prop_assert!(!all_finite, "{codec}: NonFinite on finite input"),
        EncodeError::OutOfRange {
            codec: name,
            value,
            index,
        } => {
            prop_assert!(all_finite);
            match codec {
                Codec::Fp16 => {
                    prop_assert_eq!(*name, "fp16");
                    prop_assert_eq!(value.to_bits(), acc[*index].to_bits());
                    // 65504 is the largest binary16; from 65520 on it rounds to infinity.
                    prop_assert!(value.abs() >= 65520.0, "fp16 refused {}", value);
                }
                Codec::Bf16 => {
                    prop_assert_eq!(*name, "bf16");
                    prop_assert_eq!(value.to_bits(), acc[*index].to_bits());
                    // bf16's largest is (2 - 2^-7) 2^127; halfway above it rounds up.
                    prop_assert!(f64::from(value.abs()) >= (2.0 - 2f64.powi(-8)) * 2f64.powi(127));
                }
                Codec::ThreeLc { sparsity } => {
                    prop_assert_eq!(*name, "3lc");
                    prop_assert!(
                        (max * sparsity.get()).is_infinite(),
                        "3lc refused max {}",
                        max
                    );
                }
                _ => prop_assert!(false, "{codec}: unexpected {err:?}"),
            }
        }
        EncodeError::TooLarge { .. } => prop_assert!(false, "{codec}: unexpected {err:?}"),
    }
    Ok(())
}

/// Encodes `x` through `encoder` and checks the outcome; returns the frame if any.
fn step(encoder: &mut Encoder, x: &[f32]) -> Result<Option<Vec<u8>>, TestCaseError> {
    let codec = *encoder.codec();
    let before = bits(encoder.residual());
    let acc = accumulate(x, encoder.residual(), encoder.feedback());
    let mut out = vec![9u8];
    match encoder.encode(x, &mut out) {
        Ok(header) => {
            let bytes = out.split_off(1);
            prop_assert_eq!(header.frame_len(), bytes.len());
            let mut values = Vec::new();
            let frame = decode(&bytes, &LIMITS, &mut values)
                .map_err(|e| TestCaseError::fail(format!("{codec}: own frame refused: {e}")))?;
            prop_assert_eq!(frame.header, header);
            prop_assert_eq!(values.len(), x.len());
            prop_assert_eq!(header.elements, x.len() as u64);
            Ok(Some(bytes))
        }
        Err(err) => {
            check_error(&codec, &acc, &err)?;
            prop_assert_eq!(out, vec![9u8], "output changed on error");
            if before.len() == x.len() {
                prop_assert_eq!(
                    bits(encoder.residual()),
                    before,
                    "residual changed on error"
                );
            }
            Ok(None)
        }
    }
}

// --- hand-built frames ---

/// A frame built from generated fields: sometimes sane, sometimes not.
fn raw_frame() -> impl Strategy<Value = RawFrame> {
    let elements = prop_oneof![
        4 => 0u64..300,
        1 => any::<u64>(),
        1 => prop::sample::select(vec![1u64 << 16, (1 << 16) + 1, 1 << 32, u64::MAX]),
    ];
    let params = prop_oneof![
        2 => Just(params2(1.0, 1.5)),
        1 => Just(params2(0.5, -0.5)),
        1 => Just({
            let mut p = 50f32.to_le_bytes().to_vec();
            p.extend_from_slice(&3u32.to_le_bytes());
            p
        }),
        2 => prop::collection::vec(any::<u8>(), 8),
    ];
    (
        0u8..9,
        prop_oneof![8 => Just(0u8), 2 => Just(1u8), 1 => any::<u8>()],
        elements,
        params,
        prop::collection::vec(any::<u8>(), 0..400),
        prop::bool::weighted(0.85),
        prop_oneof![19 => Just(None), 1 => any::<u32>().prop_map(Some)],
    )
        .prop_map(
            |(codec, flags, elements, params, mut payload, fit, payload_len)| {
                let params_len = match codec {
                    0..=2 => 0,
                    3 | 4 => 4,
                    _ => 8,
                };
                let params = params[..params_len.min(params.len())].to_vec();
                if fit && elements <= LIMITS.max_elements {
                    // Make the length right for the codec so the payload is read.
                    let n = elements as usize;
                    let want = match codec {
                        0 => 4 * n,
                        1 | 2 => 2 * n,
                        3 => n,
                        4 => n.div_ceil(5),
                        5 => n.div_ceil(8),
                        6 => n.div_ceil(8) + 4 * params.get(4).map_or(0, |&k| usize::from(k)),
                        _ => payload
                            .len()
                            .clamp(n.div_ceil(5).div_ceil(14), n.div_ceil(5)),
                    };
                    payload.resize(want, 121);
                }
                let mut frame = RawFrame::new(codec, elements, params, payload);
                frame.flags = flags;
                frame.payload_len = payload_len;
                frame
            },
        )
}

/// Splits every run of 121 in quartic bytes into pieces of 1..=14 chosen
/// by `choices`: a valid zero-run encoding, not necessarily the greedy one.
fn split_runs(quartic: &[u8], choices: &[u8]) -> Vec<u8> {
    let mut c = 0;
    reference::zero_run_with(quartic, |k| {
        let choice = usize::from(choices[c % choices.len()]);
        c += 1;
        1 + choice % k.min(14)
    })
}

/// Trits with long zero stretches.
fn trits() -> impl Strategy<Value = Vec<i8>> {
    let segment = prop_oneof![
        2 => prop::collection::vec(-1i8..=1, 0..12),
        2 => prop::sample::select(RUNS).prop_map(|k| vec![0i8; k]),
    ];
    prop::collection::vec(segment, 0..10).prop_map(|s| s.concat())
}

proptest! {
    // Integration tests have no lib.rs beside them for proptest's default
    // regression file; keep failures next to this file instead.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/proptest-regressions/properties.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_codec_round_trips_finite_tensors(x in tensor(), fb in feedback()) {
        for (_, codec) in codecs() {
            let mut encoder = Encoder::new(codec, fb);
            step(&mut encoder, &x)?;
            // A second tensor of the same shape sees the first one's residual.
            let reversed: Vec<f32> = x.iter().rev().copied().collect();
            step(&mut encoder, &reversed)?;
        }
    }

    #[test]
    fn generated_codec_settings_round_trip(codec in codec(), fb in feedback(), x in tensor()) {
        let mut encoder = Encoder::new(codec, fb);
        for _ in 0..3 {
            step(&mut encoder, &x)?;
        }
    }

    #[test]
    fn encoding_is_deterministic(codec in codec(), fb in feedback(), x in tensor(), y in tensor()) {
        let mut encoder = Encoder::new(codec, fb);
        let _ = encoder.encode(&y, &mut Vec::new());
        let mut twin = encoder.clone();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let ra = encoder.encode(&x, &mut a);
        let rb = twin.encode(&x, &mut b);
        prop_assert_eq!(ra, rb);
        prop_assert_eq!(a, b);
        prop_assert_eq!(bits(encoder.residual()), bits(twin.residual()));
    }

    #[test]
    fn terngrad_is_reproducible_from_its_seed(seed in any::<u64>(), x in tensor(), fb in feedback()) {
        let mut first = Encoder::new(Codec::TernGrad { seed }, fb);
        let mut second = Encoder::new(Codec::TernGrad { seed }, fb);
        for _ in 0..3 {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            prop_assert_eq!(first.encode(&x, &mut a), second.encode(&x, &mut b));
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut out = Vec::new();
        let ((), largest, total) = counted(|| {
            let _ = Frame::parse(&bytes, &LIMITS);
            let _ = decode(&bytes, &LIMITS, &mut out);
        });
        prop_assert!(largest <= ALLOCATION_BOUND && total <= 2 * ALLOCATION_BOUND);
    }

    #[test]
    fn hand_built_frames_never_panic_or_overallocate(frame in raw_frame()) {
        let bytes = frame.bytes();
        let mut out = Vec::new();
        let (result, largest, total) = counted(|| decode(&bytes, &LIMITS, &mut out).map(|f| f.header));
        prop_assert!(largest <= ALLOCATION_BOUND, "allocated {} at once", largest);
        prop_assert!(total <= 2 * ALLOCATION_BOUND, "allocated {} in all", total);
        if let Ok(header) = result {
            prop_assert!(header.elements <= LIMITS.max_elements);
            prop_assert_eq!(out.len() as u64, header.elements);
            prop_assert_eq!(header.frame_len(), bytes.len());
        }
    }

    #[test]
    fn any_flipped_byte_is_an_error(
        codec in codec(),
        x in prop::collection::vec(-1e3f32..1e3, 0..200),
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let mut bytes = Vec::new();
        Encoder::new(codec, Feedback::On).encode(&x, &mut bytes).unwrap();
        prop_assert!(Frame::parse(&bytes, &LIMITS).is_ok());
        let i = at.index(bytes.len());
        bytes[i] ^= mask;
        prop_assert!(Frame::parse(&bytes, &LIMITS).is_err(), "flip {:#04x} at {} accepted", mask, i);
        prop_assert!(decode(&bytes, &LIMITS, &mut Vec::new()).is_err());
    }

    #[test]
    fn any_truncation_is_an_error(
        codec in codec(),
        x in prop::collection::vec(-1e3f32..1e3, 0..200),
        at in any::<prop::sample::Index>(),
        tail in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut bytes = Vec::new();
        Encoder::new(codec, Feedback::On).encode(&x, &mut bytes).unwrap();
        let cut = at.index(bytes.len());
        prop_assert!(Frame::parse(&bytes[..cut], &LIMITS).is_err());
        // Bytes after a whole frame belong to the next one and are ignored.
        let len = bytes.len();
        bytes.extend_from_slice(&tail);
        let frame = Frame::parse(&bytes, &LIMITS).unwrap();
        prop_assert_eq!(frame.header.frame_len(), len);
    }

    #[test]
    fn hand_built_zero_runs_decode(
        q in trits(),
        choices in prop::collection::vec(any::<u8>(), 1..16),
        m in prop_oneof![Just(1.0f32), 1e-30f32..1e30],
    ) {
        let n = q.len();
        let quartic = reference::quartic(&q);
        let want: Vec<f32> = q.iter().map(|&q| m * f32::from(q)).collect();
        // The greedy encoding and any other valid splitting of the runs.
        for payload in [reference::zero_run(&quartic), split_runs(&quartic, &choices)] {
            prop_assert_eq!(reference::expand(&payload), quartic.clone());
            let frame = RawFrame::new(7, n as u64, params2(m, 1.0), payload);
            let mut out = Vec::new();
            decode(&frame.bytes(), &LIMITS, &mut out).unwrap();
            prop_assert_eq!(bits(&out), bits(&want));
        }
        // The encoder, given the trits as values (so M = 1 and q comes back
        // exactly), writes the greedy encoding.
        let x: Vec<f32> = q.iter().map(|&q| f32::from(q)).collect();
        let bytes = encode_one(&mut Encoder::new(threelc(1.0), Feedback::Off), &x);
        let (_, frame) = decode_one(&bytes);
        prop_assert_eq!(frame.payload, &reference::zero_run(&quartic)[..]);
    }
}
