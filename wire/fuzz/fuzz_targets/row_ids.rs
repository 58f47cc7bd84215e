//! A `RecvTensor` response that the graph says carries row ids (a
//! worker's lookup ids for a gather, an `IndexedSlices` gradient's
//! indices), decoded with prost and read by `tlc_wire::tf::ids::read_ids`
//! as both sidecars read it (`Sidecar::keep_row_ids`).
//!
//! Must hold: no panic; never more than `max` ids; the ids are exactly as
//! many as the shape names (one for a scalar), and are the content's
//! little-endian int64 (int32, widened) values, or the typed `int64_val`
//! (`int_val`) field when there is no content; dead responses, responses
//! without a tensor and non-integer tensors have none.
//!
//! Input: two mode bytes, then the response message (no gRPC prefix). The
//! first picks `max` as the sidecar derives it (`max_tensor_bytes / 8`)
//! for a 1 MiB, a 64 MiB or the largest `max_tensor`, or the second byte
//! as a small bound (0 to 255). Seeds:
//! `daemon/fuzz`'s `seeds` binary.

#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tlc_wire::tf::ids::{read_ids, IdsError};
use tlc_wire::tf::proto::{DataType, RecvTensorResponse};

fuzz_target!(|input: &[u8]| {
    let Some((&[mode, small], message)) = input.split_first_chunk::<2>() else {
        return;
    };
    let max = match mode & 3 {
        0 => (1usize << 20) / 8,
        1 => (64usize << 20) / 8,
        2 => usize::from(small),
        // The most the sidecar can pass (`max_tensor_bytes` of u64::MAX).
        // Beyond usize::MAX / 8, `read_ids` computes `count * width` with
        // overflow: a shape of 2^61 + 1 int64 ids with 8 bytes of content
        // reads as one id (a release build) or panics (overflow checks).
        _ => usize::try_from(u64::MAX / 8).unwrap_or(usize::MAX),
    };
    let Ok(response) = RecvTensorResponse::decode(message) else {
        return;
    };
    let read = read_ids(&response, max);
    let Some(tensor) = response.tensor.as_ref().filter(|_| !response.is_dead) else {
        assert_eq!(read, Err(IdsError::NoTensor));
        return;
    };
    let width = match tensor.dtype {
        d if d == DataType::DtInt64 as i32 => 8,
        d if d == DataType::DtInt32 as i32 => 4,
        other => {
            assert_eq!(read, Err(IdsError::NotInteger(other)));
            return;
        }
    };
    let Ok(ids) = read else {
        return;
    };
    assert!(ids.len() <= max, "{} ids, max {max}", ids.len());
    // As many as the shape names (no shape: a scalar, one id).
    let count = tensor.tensor_shape.as_ref().map_or(Some(1u128), |shape| {
        shape.dim.iter().try_fold(1u128, |n, d| {
            u128::try_from(d.size).ok().and_then(|s| n.checked_mul(s))
        })
    });
    assert_eq!(count, Some(ids.len() as u128));
    let content = &tensor.tensor_content;
    if !content.is_empty() {
        assert_eq!(content.len(), ids.len() * width);
        for (id, bytes) in ids.iter().zip(content.chunks_exact(width)) {
            let read = if width == 8 {
                i64::from_le_bytes(bytes.try_into().expect("8 bytes"))
            } else {
                i64::from(i32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            };
            assert_eq!(*id, read);
        }
    } else if width == 8 {
        assert_eq!(ids, tensor.int64_val);
    } else {
        let widened: Vec<i64> = tensor.int_val.iter().map(|&v| i64::from(v)).collect();
        assert_eq!(ids, widened);
    }
});
