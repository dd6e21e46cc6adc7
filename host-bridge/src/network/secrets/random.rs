//! Random identifiers from the operating system's generator.
//!
//! Placeholders, the CA's name and certificate serial numbers draw on the
//! same source rustls uses for its own keys: ring's `SystemRandom`
//! (`getrandom(2)` on Linux), reached through rustls's crypto provider so
//! the crate needs no RNG dependency of its own.

use std::fmt::Write as _;

/// The operating system's random generator failed.
#[derive(Debug, thiserror::Error)]
#[error("the system random generator failed")]
pub struct RandomError;

/// `N` random bytes.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut bytes = [0u8; N];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| RandomError)?;
    Ok(bytes)
}

/// `N` random bytes as `2 * N` lowercase hex digits.
pub(crate) fn random_hex<const N: usize>() -> Result<String, RandomError> {
    let bytes = random_bytes::<N>()?;
    let mut hex = String::with_capacity(2 * N);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_have_two_lowercase_digits_per_byte_and_differ() -> Result<(), RandomError> {
        let a = random_hex::<16>()?;
        let b = random_hex::<16>()?;
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_ne!(a, b);
        Ok(())
    }
}
