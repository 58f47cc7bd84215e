//! The checksums a mutated envelope needs again for decoding to reach
//! what the fuzzer changed (`envelope`, `rows_envelope`): the header's, a
//! section's, and each frame's CRC-32C (`codec/FORMAT.md`).

/// A frame's fixed header bytes, and its CRC trailer.
const FRAME_FIXED: usize = 21;
const FRAME_TRAILER: usize = 4;

/// The envelope header's bytes its CRC covers (the CRC follows them).
pub const HEADER_CHECKED: usize = 44;

/// Writes the CRC-32C of `data[start..checked]` into the 4 bytes after it.
pub fn seal(data: &mut [u8], start: usize, checked: usize) {
    let crc = crc32c::crc32c(&data[start..checked]);
    data[checked..checked + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Rewrites each frame's CRC-32C from byte `at` on, walking frames by the
/// lengths their headers claim, as far as the bytes reach.
pub fn seal_frames(data: &mut [u8], mut at: usize) {
    while at + FRAME_FIXED <= data.len() {
        let payload =
            u32::from_le_bytes([data[at + 16], data[at + 17], data[at + 18], data[at + 19]]);
        let params = usize::from(data[at + 20]);
        let Some(end) = (at + FRAME_FIXED + params).checked_add(payload as usize) else {
            return;
        };
        if end + FRAME_TRAILER > data.len() {
            return;
        }
        seal(data, at, end);
        at = end + FRAME_TRAILER;
    }
}
