//! Kernel module files as the package ships them (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`)
//! turned into plain `.ko` bytes, so the guest's `finit_module` never needs in-kernel
//! decompression support. Pure-Rust decoders: `lzma-rs`, `ruzstd`, `flate2`.
//!
//! Debian 12's cloud kernel ships plain `.ko`; later kernels compress them.

use std::io::{self, Read};
use std::path::Path;

/// How a module file is compressed, from its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// A plain `.ko`.
    None,
    /// `.ko.xz`
    Xz,
    /// `.ko.zst`
    Zstd,
    /// `.ko.gz`
    Gzip,
}

impl Compression {
    /// All module suffixes this crate understands, paired with their compression.
    pub const SUFFIXES: [(&'static str, Compression); 4] = [
        (".ko", Compression::None),
        (".ko.xz", Compression::Xz),
        (".ko.zst", Compression::Zstd),
        (".ko.gz", Compression::Gzip),
    ];

    /// Splits a module file name into its stem and compression: `vsock.ko.xz` -> (`vsock`, Xz).
    /// Returns `None` for files that are not kernel modules.
    pub fn split_name(file_name: &str) -> Option<(&str, Compression)> {
        Self::SUFFIXES.iter().find_map(|&(suffix, kind)| {
            file_name
                .strip_suffix(suffix)
                .filter(|stem| !stem.is_empty())
                .map(|stem| (stem, kind))
        })
    }
}

/// Why a module file could not be read or decompressed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// Reading the file failed.
    #[error("cannot read {path}")]
    Read {
        /// The module file.
        path: String,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The compressed stream is damaged.
    #[error("cannot decompress {path} ({kind:?})")]
    Decode {
        /// The module file.
        path: String,
        /// Its compression.
        kind: Compression,
        /// The decoder's complaint.
        #[source]
        source: io::Error,
    },
}

/// Reads a module file and returns its uncompressed bytes.
pub fn read_module(path: &Path) -> Result<Vec<u8>, DecompressError> {
    let display = path.display().to_string();
    let raw = std::fs::read(path).map_err(|source| DecompressError::Read {
        path: display.clone(),
        source,
    })?;
    let kind = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(Compression::split_name)
        .map_or(Compression::None, |(_, kind)| kind);
    decode(kind, raw).map_err(|source| DecompressError::Decode {
        path: display,
        kind,
        source,
    })
}

/// Decompresses `raw` according to `kind`.
pub fn decode(kind: Compression, raw: Vec<u8>) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match kind {
        Compression::None => return Ok(raw),
        Compression::Xz => lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        Compression::Zstd => {
            ruzstd::decoding::StreamingDecoder::new(raw.as_slice())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
                .read_to_end(&mut out)?;
        }
        Compression::Gzip => {
            flate2::read::GzDecoder::new(raw.as_slice()).read_to_end(&mut out)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const PAYLOAD: &[u8] = b"\x7fELF pretend module bytes, repeated repeated repeated";

    #[test]
    fn splits_module_file_names() {
        assert_eq!(
            Compression::split_name("vsock.ko"),
            Some(("vsock", Compression::None))
        );
        assert_eq!(
            Compression::split_name("virtio_blk.ko.xz"),
            Some(("virtio_blk", Compression::Xz))
        );
        assert_eq!(
            Compression::split_name("overlay.ko.zst"),
            Some(("overlay", Compression::Zstd))
        );
        assert_eq!(Compression::split_name("modules.order"), None);
        assert_eq!(Compression::split_name(".ko"), None);
    }

    #[test]
    fn xz_round_trip() -> anyhow::Result<()> {
        let mut packed = Vec::new();
        lzma_rs::xz_compress(&mut &PAYLOAD[..], &mut packed)?;
        assert_ne!(packed, PAYLOAD);
        assert_eq!(decode(Compression::Xz, packed)?, PAYLOAD);
        Ok(())
    }

    #[test]
    fn zstd_round_trip() -> anyhow::Result<()> {
        let packed =
            ruzstd::encoding::compress_to_vec(PAYLOAD, ruzstd::encoding::CompressionLevel::Fastest);
        assert_eq!(decode(Compression::Zstd, packed)?, PAYLOAD);
        Ok(())
    }

    #[test]
    fn gzip_round_trip_through_a_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("overlay.ko.gz");
        let mut enc =
            flate2::write::GzEncoder::new(std::fs::File::create(&path)?, Default::default());
        enc.write_all(PAYLOAD)?;
        enc.finish()?;
        assert_eq!(read_module(&path)?, PAYLOAD);
        Ok(())
    }

    #[test]
    fn damaged_stream_is_an_error() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("broken.ko.xz");
        std::fs::write(&path, b"not xz at all")?;
        assert!(matches!(
            read_module(&path),
            Err(DecompressError::Decode {
                kind: Compression::Xz,
                ..
            })
        ));
        Ok(())
    }
}
