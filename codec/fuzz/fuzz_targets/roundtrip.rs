//! Arbitrary f32 tensors and codec settings through one encoder: whatever
//! encodes must decode, to the right length, to finite values when the
//! input was finite, and with feedback the residual must be `acc - decoded`.
//! An encode error must be one the input deserves. With the entropy stage
//! on, a twin encoder with it off must give the same result: the same
//! values and residual, and either the same frame or one whose stage
//! decodes to the twin's payload and is smaller.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tlc_codec::{
    decode, Codec, EncodeError, Encoder, EntropyStage, Feedback, Frame, Limits, Sparsity,
    TopKPercent,
};

const LIMITS: Limits = Limits {
    max_elements: 1 << 16,
};

fn codec(u: &mut Unstructured<'_>) -> Result<Codec> {
    Ok(match u.int_in_range(0u8..=8)? {
        0 => Codec::None,
        1 => Codec::Fp16,
        2 => Codec::Bf16,
        3 => Codec::Int8,
        4 => Codec::TernGrad {
            seed: u.arbitrary()?,
        },
        5 => Codec::OneBit,
        6 => Codec::TopK {
            percent: TopKPercent::new(f32::from(u.int_in_range(1u16..=1000)?) / 10.0).unwrap(),
        },
        8 => Codec::Int8Rows {
            row_len: u.int_in_range(1u32..=300)?,
        },
        _ => Codec::ThreeLc {
            sparsity: Sparsity::new(1.0 + f32::from(u.int_in_range(0u16..=999)?) / 1000.0).unwrap(),
        },
    })
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let mut encoder = Encoder::new(
        codec(&mut u)?,
        if u.arbitrary()? {
            Feedback::On
        } else {
            Feedback::Off
        },
    );
    if u.arbitrary()? {
        encoder.set_entropy_stage(EntropyStage::Zstd);
    }
    let steps = u.int_in_range(1u8..=3)?;
    let n = u.int_in_range(0usize..=2000)?;
    let mut x = Vec::with_capacity(n);
    for _ in 0..n {
        // Raw bits: NaN, infinities and subnormals included.
        x.push(f32::from_bits(u.arbitrary()?));
    }
    for step in 0..steps {
        if step > 0 {
            // Later tensors: the same shape, so the residual carries over;
            // sometimes a new codec on the same context.
            if !x.is_empty() {
                x.rotate_left(1);
            }
            if u.arbitrary()? {
                encoder.set_codec(codec(&mut u)?);
            }
        }
        check(&mut encoder, &x);
    }
    Ok(())
}

fn check(encoder: &mut Encoder, x: &[f32]) {
    let codec = *encoder.codec();
    let feedback = encoder.feedback() == Feedback::On;
    let acc: Vec<f32> = if feedback && encoder.residual().len() == x.len() {
        x.iter()
            .zip(encoder.residual())
            .map(|(x, e)| x + e)
            .collect()
    } else if feedback {
        x.iter().map(|x| x + 0.0).collect()
    } else {
        x.to_vec()
    };
    let finite = acc.iter().all(|a| a.is_finite());
    let max = acc.iter().fold(0f32, |m, a| m.max(a.abs()));
    let mut twin = encoder.clone();
    twin.set_entropy_stage(EntropyStage::Off);
    let mut plain = Vec::new();
    let twin_result = twin.encode(x, &mut plain);
    let mut out = Vec::new();
    let result = encoder.encode(x, &mut out);
    match (&result, &twin_result) {
        (Ok(header), Ok(plain_header)) => {
            assert_eq!(
                bits(encoder.residual()),
                bits(twin.residual()),
                "{codec}: the stage changed the residual"
            );
            match header.raw_len {
                None => assert_eq!(out, plain, "{codec}: plain frames differ"),
                Some(raw_len) => {
                    assert_eq!(encoder.entropy_stage(), EntropyStage::Zstd);
                    assert_eq!(raw_len, plain_header.payload_len);
                    assert!(header.payload_len < raw_len, "{codec}: the stage grew");
                    let staged = Frame::parse(&out, &LIMITS).expect("own frame parses");
                    let payload = staged.codec_payload().expect("own stage decodes");
                    let twin_frame = Frame::parse(&plain, &LIMITS).expect("twin parses");
                    assert_eq!(&payload[..], twin_frame.payload, "{codec}: stage payload");
                }
            }
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "{codec}: the stage changed the error"),
        _ => panic!("{codec}: the stage changed whether the tensor encodes"),
    }
    match result {
        Ok(header) => {
            assert_eq!(header.frame_len(), out.len());
            let mut values = Vec::new();
            let frame = decode(&out, &LIMITS, &mut values)
                .unwrap_or_else(|e| panic!("{codec}: own frame refused: {e}"));
            assert_eq!(frame.header, header);
            assert_eq!(values.len(), x.len());
            // int8 refuses a max|acc| whose step overflows at level 127
            // (tests/roundtrip.rs int8_of_f32_max_decodes_finite), so
            // whatever it encodes decodes finite, as every codec's must.
            if finite {
                assert!(
                    values.iter().all(|v| v.is_finite()),
                    "{codec}: non-finite output"
                );
                if feedback {
                    for ((a, d), e) in acc.iter().zip(&values).zip(encoder.residual()) {
                        assert_eq!((a - d).to_bits(), e.to_bits(), "{codec}: residual");
                    }
                }
            }
        }
        Err(EncodeError::NonFinite) => assert!(!finite, "{codec}: NonFinite on finite input"),
        Err(EncodeError::OutOfRange {
            codec: name, value, ..
        }) => {
            assert!(finite);
            match name {
                "fp16" => assert!(value.abs() >= 65520.0),
                "bf16" => assert!(value.abs() > 3.3e38),
                "3lc" => assert!(max > f32::MAX / 2.0),
                // Deliberate: the step `max / 127` rounds up near f32::MAX
                // and `127 * step` overflows; only that close to it. The
                // same for a row's step in int8-rows.
                "int8" | "int8-rows" => {
                    assert!(value.abs() > f32::MAX * 0.999, "{name} refused {value}")
                }
                other => panic!("{other} out of range"),
            }
        }
        Err(err) => panic!("{codec}: {err}"),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
