//! Raw little-endian f32 files, and writing an output file so that a failed
//! command never leaves a half-written one behind.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Size of one value on disk.
pub const F32_BYTES: usize = 4;

/// Reads a whole file, naming it in the error.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Reads a file of raw little-endian f32 values. Its length must be a
/// multiple of 4 bytes.
pub fn read_f32_file(path: &Path) -> Result<Vec<f32>> {
    let bytes = read_bytes(path)?;
    if bytes.len() % F32_BYTES != 0 {
        bail!(
            "{} is {} bytes long, which is not a multiple of 4 (raw little-endian f32 expected)",
            path.display(),
            bytes.len()
        );
    }
    Ok(f32_from_le_bytes(&bytes))
}

/// Converts whole 4-byte groups to f32 values (a trailing partial group is ignored).
pub fn f32_from_le_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(F32_BYTES)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Appends `values` as raw little-endian f32 to `out`.
pub fn extend_le_bytes(out: &mut Vec<u8>, values: &[f32]) {
    out.reserve(values.len() * F32_BYTES);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Creates `path` with what `fill` writes, or leaves it untouched on error.
///
/// The data goes to a temporary file in the same directory, which is
/// renamed over `path` only once `fill` has succeeded and everything has
/// been flushed; on any error the temporary file is removed.
pub fn write_atomically<F>(path: &Path, fill: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> Result<()>,
{
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".tlcctl-").suffix(".tmp");
    // A temporary file is private (0600) by default; the output should get
    // the usual permissions of a new file (0666 less the umask).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let temp = builder
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    let mut writer = BufWriter::new(temp);
    fill(&mut writer)?;
    let temp = writer
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("cannot write {}", path.display()))?;
    temp.as_file()
        .sync_all()
        .with_context(|| format!("cannot write {}", path.display()))?;
    temp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot create {}", path.display()))?;
    Ok(())
}
