//! Just enough DER to find a certificate's subject: a reader of
//! tag-length-value items (single-byte tags, definite lengths, as DER
//! requires) and [`subject_of`], which walks `Certificate` to the subject
//! `Name` of its `TBSCertificate` (RFC 5280, 4.1).

/// DER's universal tags that this crate names.
pub mod tag {
    /// `SEQUENCE`, constructed.
    pub const SEQUENCE: u8 = 0x30;
    /// `SET`, constructed.
    pub const SET: u8 = 0x31;
    /// `INTEGER`.
    pub const INTEGER: u8 = 0x02;
    /// `OBJECT IDENTIFIER`.
    pub const OID: u8 = 0x06;
    /// `UTF8String`.
    pub const UTF8_STRING: u8 = 0x0c;
    /// `PrintableString`.
    pub const PRINTABLE_STRING: u8 = 0x13;
    /// `T61String` (`TeletexString`).
    pub const T61_STRING: u8 = 0x14;
    /// `IA5String`.
    pub const IA5_STRING: u8 = 0x16;
    /// `VisibleString`.
    pub const VISIBLE_STRING: u8 = 0x1a;
    /// `UniversalString` (UCS-4, big-endian).
    pub const UNIVERSAL_STRING: u8 = 0x1c;
    /// `BMPString` (UCS-2, big-endian).
    pub const BMP_STRING: u8 = 0x1e;
    /// `[0]`, constructed: the explicit version of a `TBSCertificate`.
    pub const VERSION: u8 = 0xa0;
}

/// Bytes that are not the DER this reader expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DerError {
    /// The input ended inside an item.
    #[error("truncated DER")]
    Truncated,
    /// A tag of more than one byte, or an indefinite or oversized length.
    #[error("unsupported DER encoding")]
    Unsupported,
    /// An item has another tag than the structure needs there.
    #[error("expected tag {expected:#04x}, found {found:#04x}")]
    UnexpectedTag {
        /// The tag the structure needs.
        expected: u8,
        /// The tag found.
        found: u8,
    },
    /// Bytes follow the certificate.
    #[error("bytes after the certificate")]
    Trailing,
}

/// One item: its tag, its content, and its whole encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// The tag byte.
    pub tag: u8,
    /// The content octets.
    pub content: &'a [u8],
    /// Tag, length and content.
    pub encoded: &'a [u8],
}

/// Reads items off the front of a byte slice.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `input`.
    pub fn new(input: &'a [u8]) -> Self {
        Self { rest: input }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next item, whatever its tag.
    pub fn next_item(&mut self) -> Result<Item<'a>, DerError> {
        let input = self.rest;
        let (&tag, after_tag) = input.split_first().ok_or(DerError::Truncated)?;
        if tag & 0x1f == 0x1f {
            return Err(DerError::Unsupported);
        }
        let (&first, mut after_len) = after_tag.split_first().ok_or(DerError::Truncated)?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                return Err(DerError::Unsupported);
            }
            if after_len.len() < count {
                return Err(DerError::Truncated);
            }
            let (bytes, rest) = after_len.split_at(count);
            after_len = rest;
            bytes
                .iter()
                .fold(0usize, |len, &b| (len << 8) | usize::from(b))
        };
        if after_len.len() < len {
            return Err(DerError::Truncated);
        }
        let header = input.len() - after_len.len();
        let (encoded, rest) = input.split_at(header + len);
        self.rest = rest;
        Ok(Item {
            tag,
            content: &encoded[header..],
            encoded,
        })
    }

    /// The next item, which must have tag `expected`.
    pub fn expect(&mut self, expected: u8) -> Result<Item<'a>, DerError> {
        let item = self.next_item()?;
        if item.tag != expected {
            return Err(DerError::UnexpectedTag {
                expected,
                found: item.tag,
            });
        }
        Ok(item)
    }
}

/// Writes a tag and a DER length.
pub fn write_header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    if len < 0x80 {
        // Fits in seven bits: the short form.
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        let significant = &bytes[skip..];
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
}

/// The subject `Name` (a `SEQUENCE` of relative distinguished names) of a
/// certificate, as encoded in it.
pub fn subject_of(certificate: &[u8]) -> Result<Item<'_>, DerError> {
    let mut outer = Reader::new(certificate);
    let cert = outer.expect(tag::SEQUENCE)?;
    if !outer.is_empty() {
        return Err(DerError::Trailing);
    }
    let mut cert = Reader::new(cert.content);
    let tbs = cert.expect(tag::SEQUENCE)?;
    let mut tbs = Reader::new(tbs.content);
    let mut item = tbs.next_item()?;
    if item.tag == tag::VERSION {
        item = tbs.next_item()?;
    }
    if item.tag != tag::INTEGER {
        return Err(DerError::UnexpectedTag {
            expected: tag::INTEGER,
            found: item.tag,
        });
    }
    tbs.expect(tag::SEQUENCE)?; // signature algorithm
    tbs.expect(tag::SEQUENCE)?; // issuer
    tbs.expect(tag::SEQUENCE)?; // validity
    tbs.expect(tag::SEQUENCE) // subject
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lengths_read_and_write_alike() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let mut encoded = Vec::new();
            write_header(&mut encoded, tag::SEQUENCE, len);
            encoded.extend(std::iter::repeat_n(7u8, len));
            let mut reader = Reader::new(&encoded);
            let item = reader.expect(tag::SEQUENCE).unwrap();
            assert_eq!(item.content.len(), len);
            assert_eq!(item.encoded, &encoded[..]);
            assert!(reader.is_empty());
        }
    }

    #[test]
    fn bad_encodings_are_errors_not_panics() {
        assert_eq!(Reader::new(&[]).next_item(), Err(DerError::Truncated));
        assert_eq!(Reader::new(&[0x30]).next_item(), Err(DerError::Truncated));
        assert_eq!(
            Reader::new(&[0x30, 0x05, 1]).next_item(),
            Err(DerError::Truncated)
        );
        assert_eq!(
            Reader::new(&[0x30, 0x80, 0, 0]).next_item(),
            Err(DerError::Unsupported),
            "indefinite length"
        );
        assert_eq!(
            Reader::new(&[0x1f, 0x01, 0]).next_item(),
            Err(DerError::Unsupported),
            "multi-byte tag"
        );
        assert_eq!(
            Reader::new(&[0x30, 0x85, 1, 1, 1, 1, 1]).next_item(),
            Err(DerError::Unsupported)
        );
        assert!(subject_of(&[0x30, 0x00]).is_err());
        assert!(subject_of(b"not a certificate").is_err());
    }
}
