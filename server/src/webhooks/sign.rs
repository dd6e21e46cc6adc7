//! A webhook's secret and the signature of a delivery: HMAC-SHA256 of the
//! body with the secret, in lowercase hex after `v1=` (the
//! `airlock-signature` header; `airlock-signature-version` is `v1`).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The version the signature header names.
pub const VERSION: &str = "v1";

/// Marks a webhook secret, so that a leaked one is recognised.
const PREFIX: &str = "whsec_";

/// Random bytes in a secret.
const SECRET_BYTES: usize = 32;

/// A new secret: the prefix and 256 random bits in base64url.
pub fn new_secret() -> std::io::Result<String> {
    let bytes = airlock::random::bytes::<SECRET_BYTES>()?;
    Ok(format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// The `airlock-signature` of `body` with `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut text = String::with_capacity(3 + 2 * digest.len());
    text.push_str(VERSION);
    text.push('=');
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Whether `signature` is `body`'s with `secret`, compared in constant
/// time (what a receiver does).
#[cfg(test)]
pub fn verify(secret: &str, body: &[u8], signature: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(sign(secret, body).as_bytes().ct_eq(signature.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        let signature = sign("Jefe", b"what do ya want for nothing?");
        assert_eq!(
            signature,
            "v1=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_changed_body_or_secret_does_not_verify() {
        let body = br#"{"seq":1}"#;
        let signature = sign("whsec_a", body);
        assert!(verify("whsec_a", body, &signature));
        assert!(!verify("whsec_b", body, &signature));
        assert!(!verify("whsec_a", br#"{"seq":2}"#, &signature));
    }

    #[test]
    fn secrets_are_new_each_time_and_marked() {
        let one = new_secret().unwrap();
        let two = new_secret().unwrap();
        assert_ne!(one, two);
        assert!(one.starts_with("whsec_"));
        assert_eq!(one.len(), 6 + 43);
    }
}
