//! Bytes as a model reads them: whether output is text at all, cutting
//! text at character boundaries, and sizes in words.

/// Share of control characters (other than whitespace and escape
/// sequences) past which text is taken for binary.
const CONTROL_SHARE: usize = 10;

/// Whether `bytes` are not text a model can read: a NUL byte, bytes that
/// are not UTF-8 (an incomplete character at either end is forgiven: a cut
/// may fall inside one), or more than a tenth control characters.
pub fn looks_binary(bytes: &[u8]) -> bool {
    if bytes.contains(&0) {
        return true;
    }
    let start = leading_continuations(bytes);
    let body = &bytes[start..];
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(error) if error.error_len().is_none() => {
            // Only the last character is incomplete.
            match std::str::from_utf8(&body[..error.valid_up_to()]) {
                Ok(text) => text,
                Err(_) => return true,
            }
        }
        Err(_) => return true,
    };
    let mut chars = 0usize;
    let mut controls = 0usize;
    for c in text.chars() {
        chars += 1;
        if c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x1b' | '\x08' | '\x0c') {
            controls += 1;
        }
    }
    controls * CONTROL_SHARE > chars
}

/// Bytes at the start that continue a character begun before them (at
/// most three).
fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|&&b| b & 0xC0 == 0x80)
        .count()
}

/// At most `limit` bytes from the start of `bytes`, ending on a character
/// boundary, as text (anything not UTF-8 replaced).
pub fn head(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut end = limit;
    // Step back over a character the limit would split.
    while end > 0 && end > limit.saturating_sub(3) && bytes[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// At most `limit` bytes from the end of `bytes`, starting on a character
/// boundary, as text.
pub fn tail(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        let skip = leading_continuations(bytes);
        return String::from_utf8_lossy(&bytes[skip..]).into_owned();
    }
    let start = bytes.len() - limit;
    let skip = leading_continuations(&bytes[start..]);
    String::from_utf8_lossy(&bytes[start + skip..]).into_owned()
}

/// `12,345` for 12345.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `10,485,760 bytes (10.0 MiB)`, `12 bytes`.
pub fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    let plain = if n == 1 {
        "1 byte".to_owned()
    } else {
        format!("{} bytes", count(n))
    };
    match UNITS.iter().find(|(_, size)| n >= *size) {
        Some((unit, size)) => format!("{plain} ({:.1} {unit})", n as f64 / *size as f64),
        None => plain,
    }
}

/// The first bytes of `data` in hex, for a description of binary data.
pub fn hex_prefix(data: &[u8], limit: usize) -> String {
    data.iter()
        .take(limit)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_text_and_binary_is_not() {
        assert!(!looks_binary(b"hello\nworld\t\x1b[31mred\x1b[0m\r\n"));
        assert!(!looks_binary("déjà vu ✓".as_bytes()));
        assert!(!looks_binary(b""));
        assert!(looks_binary(b"abc\0def"));
        assert!(looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00"));
        assert!(looks_binary(&[0xff, 0xfe, b'a', b'b', b'c', b'd']));
        assert!(looks_binary(b"\x01\x02\x03\x04abc"));
    }

    #[test]
    fn a_character_split_at_either_end_is_still_text() {
        let text = "ééé".as_bytes();
        assert!(!looks_binary(&text[1..]), "starts inside a character");
        assert!(!looks_binary(&text[..text.len() - 1]), "ends inside one");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let text = "aé✓b".as_bytes(); // 1 + 2 + 3 + 1 bytes
        assert_eq!(head(text, 2), "a");
        assert_eq!(head(text, 3), "aé");
        assert_eq!(head(text, 5), "aé");
        assert_eq!(head(text, 100), "aé✓b");
        assert_eq!(tail(text, 1), "b");
        assert_eq!(tail(text, 3), "b");
        assert_eq!(tail(text, 4), "✓b");
        assert_eq!(tail(text, 100), "aé✓b");
    }

    #[test]
    fn sizes_read_as_words() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(10_485_760), "10,485,760");
        assert_eq!(bytes(1), "1 byte");
        assert_eq!(bytes(12), "12 bytes");
        assert_eq!(bytes(10 << 20), "10,485,760 bytes (10.0 MiB)");
        assert_eq!(hex_prefix(b"\x7fELF", 8), "7f 45 4c 46");
    }
}
