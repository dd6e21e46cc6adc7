//! Mixing the host's entropy into the guest kernel's random pool and
//! reseeding the kernel's generator from it at once.
//!
//! A clone of a template VM wakes with the template's CRNG state, so every
//! clone would draw the same "random" numbers until the kernel next reseeds.
//! Writing to `/dev/urandom` mixes bytes into the input pool (without
//! crediting entropy), but the CRNG draws on the pool only at its next
//! periodic reseed, up to a minute later. The `RNDRESEEDCRNG` ioctl (Linux
//! 4.17+, `CAP_SYS_ADMIN`) makes it reseed now; a kernel that refuses it
//! still has the bytes in its pool.
//!
//! nix has no safe wrapper for this ioctl, so this module holds the agent's
//! second module with `unsafe` (the other is `spawn::vfork`, the clone that
//! starts programs): one `ioctl` call that passes no memory.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The device whose writes are mixed into the input pool.
pub const URANDOM: &str = "/dev/urandom";

/// The entropy could not be mixed in.
#[derive(Debug, thiserror::Error)]
pub enum EntropyError {
    /// The random device could not be opened for writing.
    #[error("cannot open {}", path.display())]
    Open {
        /// The device.
        path: PathBuf,
        /// Why opening failed.
        #[source]
        source: io::Error,
    },
    /// The bytes could not be written.
    #[error("cannot write entropy to {}", path.display())]
    Write {
        /// The device.
        path: PathBuf,
        /// Why writing failed.
        #[source]
        source: io::Error,
    },
}

/// Writes `entropy` to the random device at `path` ([`URANDOM`]) and asks
/// the kernel to reseed its generator; returns whether it did. A refused
/// reseed is logged, not an error: the bytes are in the pool either way.
pub fn mix_and_reseed(path: &Path, entropy: &[u8]) -> Result<bool, EntropyError> {
    let mut device = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|source| EntropyError::Open {
            path: path.to_owned(),
            source,
        })?;
    device
        .write_all(entropy)
        .map_err(|source| EntropyError::Write {
            path: path.to_owned(),
            source,
        })?;
    match reseed(&device) {
        Ok(()) => Ok(true),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "the kernel refused RNDRESEEDCRNG; the entropy is mixed in but used from the next periodic reseed"
            );
            Ok(false)
        }
    }
}

mod ioctl {
    // <linux/random.h>: #define RNDRESEEDCRNG _IO('R', 0x07)
    nix::ioctl_none!(rnd_reseed_crng, b'R', 0x07);
}

/// `RNDRESEEDCRNG` on an open random device.
fn reseed(device: &File) -> nix::Result<()> {
    // SAFETY: RNDRESEEDCRNG takes no argument, so the kernel reads and
    // writes none of our memory; the descriptor is open (borrowed from
    // `device`) for the whole call. On a file that is not a random device
    // the kernel answers ENOTTY.
    unsafe { ioctl::rnd_reseed_crng(device.as_raw_fd()) }?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_random_device_takes_the_bytes_but_does_not_reseed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        std::fs::write(&path, b"").unwrap();
        let entropy = [7u8; 32];
        assert!(!mix_and_reseed(&path, &entropy).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), entropy);
    }

    #[test]
    fn a_missing_device_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("urandom");
        let err = mix_and_reseed(&path, &[0u8; 32]).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
