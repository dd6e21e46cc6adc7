//! How a client proves who it is on the TCP listener: an API key in the
//! `authorization` metadata entry, as `Bearer KEY`.
//!
//! A key is [`KEY_PREFIX`] and 43 characters of unpadded base64url: 256
//! random bits. The prefix makes a leaked key easy to recognise (secret
//! scanners, logs) and a pasted one easy to check.

/// The metadata entry (HTTP/2 header) that carries the key.
pub const HEADER: &str = "authorization";
/// What precedes the key in [`HEADER`].
pub const SCHEME: &str = "Bearer ";
/// Every key starts with this.
pub const KEY_PREFIX: &str = "ak_";
/// Random bytes in a key.
pub const KEY_BYTES: usize = 32;
/// A key's length in characters: the prefix and 43 of base64url.
pub const KEY_LEN: usize = KEY_PREFIX.len() + 43;

/// The key in an `authorization` value, if it is `Bearer ` and a key of the
/// right form (the server still has to know it).
pub fn bearer_key(value: &str) -> Option<&str> {
    let key = value.strip_prefix(SCHEME)?.trim();
    is_well_formed(key).then_some(key)
}

/// Whether `key` has the form of a key: the prefix, then 43 base64url
/// characters.
pub fn is_well_formed(key: &str) -> bool {
    key.len() == KEY_LEN
        && key.starts_with(KEY_PREFIX)
        && key[KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_key_of_the_right_form_is_taken() {
        let key = format!("{KEY_PREFIX}{}", "a".repeat(43));
        assert_eq!(bearer_key(&format!("Bearer {key}")), Some(key.as_str()));
        assert_eq!(bearer_key(&key), None);
        assert_eq!(bearer_key(&format!("Basic {key}")), None);
        assert_eq!(bearer_key("Bearer ak_short"), None);
        assert_eq!(bearer_key(&format!("Bearer {}", "a".repeat(46))), None);
        let bad = format!("{KEY_PREFIX}{}!", "a".repeat(42));
        assert_eq!(bearer_key(&format!("Bearer {bad}")), None);
    }
}
