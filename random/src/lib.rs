//! The one source of random values on the host: ids, tokens, keys, the
//! gateway's placeholders and CA names, and a guest's first entropy all
//! come from the kernel's CSPRNG (`/dev/urandom`, which never blocks once
//! the host has booted).
//!
//! [`fill`], [`bytes`] and [`hex`] return the device's `io::Error`, for
//! callers that report it beside other I/O; [`RandomError`] names that
//! failure for an error enum that wants its own variant.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::io::Read;

/// The kernel's random device.
pub const SOURCE: &str = "/dev/urandom";

/// The kernel's random device could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading random bytes from {SOURCE}")]
pub struct RandomError(#[from] pub std::io::Error);

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    std::fs::File::open(SOURCE)?.read_exact(buf)
}

/// `N` random bytes.
pub fn bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    fill(&mut buf)?;
    Ok(buf)
}

/// `N` random bytes in lowercase hex (`2 * N` characters): ids that keep
/// their meaning when a browser or DNS lowercases them.
pub fn hex<const N: usize>() -> std::io::Result<String> {
    let bytes = bytes::<N>()?;
    let mut text = String::with_capacity(2 * N);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_differs_each_time() -> std::io::Result<()> {
        let a = hex::<16>()?;
        let b = hex::<16>()?;
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{a}"
        );
        assert_ne!(a, b);
        Ok(())
    }

    #[test]
    fn bytes_fill_the_whole_array() -> std::io::Result<()> {
        // 64 zero bytes from a working CSPRNG: about 2^-512.
        assert_ne!(bytes::<64>()?, [0u8; 64]);
        Ok(())
    }

    #[test]
    fn the_error_names_the_device_and_keeps_its_cause() {
        let error = RandomError::from(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(error.to_string(), "reading random bytes from /dev/urandom");
        assert!(std::error::Error::source(&error).is_some());
    }
}
