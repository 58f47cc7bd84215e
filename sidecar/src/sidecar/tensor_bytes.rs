//! Tensor content as f32 values and back, without copying where it can.
//!
//! TensorFlow's `tensor_content` is the tensor's memory: little-endian f32
//! on every platform tlc runs on.

use bytes::Bytes;

#[cfg(target_endian = "big")]
compile_error!("tlcd reads tensor_content as native f32 and supports little-endian hosts only");

/// The content as f32 values: borrowed when the bytes happen to be 4-byte
/// aligned, else copied once into `scratch`.
pub fn as_f32<'a>(content: &'a Bytes, scratch: &'a mut Vec<f32>) -> &'a [f32] {
    match bytemuck::try_cast_slice::<u8, f32>(content) {
        Ok(values) => values,
        Err(_) => {
            scratch.clear();
            scratch.extend(
                content
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            scratch
        }
    }
}

/// Owns f32 values and shows them as bytes, so a decoded tensor becomes
/// `Bytes` without a copy.
struct F32Bytes(Vec<f32>);

impl AsRef<[u8]> for F32Bytes {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// The values as tensor content, without copying them.
pub fn into_bytes(values: Vec<f32>) -> Bytes {
    Bytes::from_owner(F32Bytes(values))
}

/// A copy of the values as tensor content.
pub fn copy_to_bytes(values: &[f32]) -> Bytes {
    Bytes::copy_from_slice(bytemuck::cast_slice(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_aligned_and_not() {
        let values = vec![1.5f32, -2.0, 0.0, f32::MIN_POSITIVE];
        let bytes = into_bytes(values.clone());
        let mut scratch = Vec::new();
        assert_eq!(as_f32(&bytes, &mut scratch), values.as_slice());
        // Shift by one byte: unaligned, so it is copied.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        let unaligned = Bytes::from(shifted).slice(1..);
        assert_eq!(as_f32(&unaligned, &mut scratch), values.as_slice());
        assert_eq!(copy_to_bytes(&values), bytes);
    }
}
