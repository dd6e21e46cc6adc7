//! OpenSSL's subject hash (`X509_NAME_hash`, what `openssl x509 -hash`
//! prints and `openssl rehash` names links by): the first four bytes of the
//! SHA-1 of the subject's canonical encoding, read as a little-endian
//! number and written as 8 hex digits.
//!
//! The canonical encoding (OpenSSL's `x509_name_canon`) is each relative
//! distinguished name, a `SET` of attribute-value `SEQUENCE`s, encoded one
//! after another without the outer `SEQUENCE`; in it every value of a
//! string type (UTF8String, PrintableString, T61String, IA5String,
//! VisibleString, BMPString, UniversalString) becomes a UTF8String with its
//! leading and trailing white space removed, inner runs of white space
//! collapsed to one space and ASCII letters lowered; values of other types
//! stay as they are. A `SET`'s members are sorted by their encoding, as
//! DER wants.

use sha1::{Digest, Sha1};

use super::der::{self, tag, DerError, Reader};

/// A subject that cannot be hashed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// The name is not DER as a certificate's subject is.
    #[error(transparent)]
    Der(#[from] DerError),
    /// A string value does not decode in its type's character set.
    #[error("a name value is not valid {0}")]
    BadString(&'static str),
}

/// The subject hash of a certificate (DER), as OpenSSL names its links.
pub fn of_certificate(certificate: &[u8]) -> Result<String, HashError> {
    let subject = der::subject_of(certificate)?;
    of_name(subject.content)
}

/// The hash of a `Name` given as the content of its `SEQUENCE`.
pub fn of_name(rdns: &[u8]) -> Result<String, HashError> {
    let digest = Sha1::digest(canonical(rdns)?);
    let hash = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    Ok(format!("{hash:08x}"))
}

/// The canonical encoding of a `Name`'s relative distinguished names.
fn canonical(rdns: &[u8]) -> Result<Vec<u8>, HashError> {
    let mut out = Vec::new();
    let mut names = Reader::new(rdns);
    while !names.is_empty() {
        let set = names.expect(tag::SET)?;
        let mut members = Vec::new();
        let mut entries = Reader::new(set.content);
        while !entries.is_empty() {
            let entry = entries.expect(tag::SEQUENCE)?;
            let mut fields = Reader::new(entry.content);
            let oid = fields.expect(tag::OID)?;
            let value = fields.next_item()?;
            let mut body = oid.encoded.to_vec();
            match canonical_text(value.tag, value.content)? {
                Some(text) => {
                    der::write_header(&mut body, tag::UTF8_STRING, text.len());
                    body.extend_from_slice(text.as_bytes());
                }
                None => body.extend_from_slice(value.encoded),
            }
            let mut member = Vec::with_capacity(body.len() + 4);
            der::write_header(&mut member, tag::SEQUENCE, body.len());
            member.extend_from_slice(&body);
            members.push(member);
        }
        // OpenSSL's order for a SET OF: by content, then by length.
        members.sort_by(|a, b| {
            let common = a.len().min(b.len());
            a[..common].cmp(&b[..common]).then(a.len().cmp(&b.len()))
        });
        let len = members.iter().map(Vec::len).sum();
        der::write_header(&mut out, tag::SET, len);
        for member in members {
            out.extend_from_slice(&member);
        }
    }
    Ok(out)
}

/// The canonical text of a string value, or `None` for a value of a type
/// that is kept as it is.
fn canonical_text(value_tag: u8, content: &[u8]) -> Result<Option<String>, HashError> {
    let text: String = match value_tag {
        tag::UTF8_STRING => std::str::from_utf8(content)
            .map_err(|_| HashError::BadString("UTF-8"))?
            .to_owned(),
        // One byte a character, each its own code point, as OpenSSL reads them.
        tag::PRINTABLE_STRING | tag::T61_STRING | tag::IA5_STRING | tag::VISIBLE_STRING => {
            content.iter().map(|&b| char::from(b)).collect()
        }
        tag::BMP_STRING => {
            if !content.len().is_multiple_of(2) {
                return Err(HashError::BadString("BMPString"));
            }
            content
                .chunks_exact(2)
                .map(|pair| char::from_u32(u32::from(u16::from_be_bytes([pair[0], pair[1]]))))
                .collect::<Option<String>>()
                .ok_or(HashError::BadString("BMPString"))?
        }
        tag::UNIVERSAL_STRING => {
            if !content.len().is_multiple_of(4) {
                return Err(HashError::BadString("UniversalString"));
            }
            content
                .chunks_exact(4)
                .map(|quad| {
                    char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]))
                })
                .collect::<Option<String>>()
                .ok_or(HashError::BadString("UniversalString"))?
        }
        _ => return Ok(None),
    };
    Ok(Some(fold(&text)))
}

/// OpenSSL's folding: trim white space, collapse inner runs of it to one
/// space, lower ASCII letters; bytes outside ASCII stay as they are.
fn fold(text: &str) -> String {
    // OpenSSL's isspace: space, \t, \n, \v, \f, \r.
    let space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let mut out = String::with_capacity(text.len());
    let mut in_space = false;
    for c in text.trim_matches(space).chars() {
        if space(c) {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_space = false;
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::Engine;

    /// Certificates made with `openssl req -x509`, and the hash
    /// `openssl x509 -hash` printed for each.
    const PLAIN: &str = "-----BEGIN CERTIFICATE-----
MIIBkDCCATWgAwIBAgIUbfPmqJQL9dPbl9hS2VAygHbIcskwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRQWlybG9jayBUZXN0IFJvb3QwIBcNMjYxMjAyMTg1NTM1WhgP
MjEyNjExMDgxODU1MzVaMBwxGjAYBgNVBAMMEUFpcmxvY2sgVGVzdCBSb290MFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9CW0hc+lSswMk+p6RQafAL9Y0GsXDR5Y
iNyuL23Q8844FSS40YAT84XQ8OAGsNanmMCt8ZVW+gHPkihxH0V1eaNTMFEwHQYD
VR0OBBYEFO5iD/IFKWn6QknhBMiUu5YV2sJQMB8GA1UdIwQYMBaAFO5iD/IFKWn6
QknhBMiUu5YV2sJQMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIh
AMwc+USBy8+LMQMNVjhz2FIoCxhHgyUmK6cb+u+hv5iYAiEA/zamMhiti7J5rmLC
bevTpA2KRxtfJDW1sxZb1UImggs=
-----END CERTIFICATE-----";
    const SPACES_PRINTABLE: &str = "-----BEGIN CERTIFICATE-----
MIIBWDCB/wIUMR0d/CnAO0PsnmlyumkfbZLQSv8wCgYIKoZIzj0EAwIwLjEbMBkG
A1UEChQSQUNNRSAgIFdpZGdldHMJSW5jMQ8wDQYDVQQDEwZCaWcgQ0EwIBcNMjYx
MjAyMTg1NTM1WhgPMjEyNjExMDgxODU1MzVaMC4xGzAZBgNVBAoUEkFDTUUgICBX
aWRnZXRzCUluYzEPMA0GA1UEAxMGQmlnIENBMFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAE9CW0hc+lSswMk+p6RQafAL9Y0GsXDR5YiNyuL23Q8844FSS40YAT84XQ
8OAGsNanmMCt8ZVW+gHPkihxH0V1eTAKBggqhkjOPQQDAgNIADBFAiEAzSp2NWrI
BQe30dzZ0N1ewYRAHeWxaWjj5nsSMGz4kggCIGpePMRviO4yYDZ/dX7HIJhXU4Jw
0toaVjhczMTOpR9j
-----END CERTIFICATE-----";
    const BMP: &str = "-----BEGIN CERTIFICATE-----
MIIBRzCB7QIUW/9U+hgErO77neIXv4FhiZuw1NAwCgYIKoZIzj0EAwIwJTEjMCEG
A1UEAx4aAEIATQBQACAA3ABiAGUAcgAgAFIAbwBvAHQwIBcNMjYxMjAyMTg1NTM1
WhgPMjEyNjExMDgxODU1MzVaMCUxIzAhBgNVBAMeGgBCAE0AUAAgANwAYgBlAHIA
IABSAG8AbwB0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9CW0hc+lSswMk+p6
RQafAL9Y0GsXDR5YiNyuL23Q8844FSS40YAT84XQ8OAGsNanmMCt8ZVW+gHPkihx
H0V1eTAKBggqhkjOPQQDAgNJADBGAiEA7HuaJCh2RVSycrJuLTitbMZtuF60xv1s
soH+/t6GuHoCIQDA8iRQ3JeHTLQoZtfBZm4qgSAdgdeKGUNM/UJ/vgbVxg==
-----END CERTIFICATE-----";
    const MULTI: &str = "-----BEGIN CERTIFICATE-----
MIIBwDCCAWWgAwIBAgIUDbXbDY798Fr6Br26AapZ8WxWlugwCgYIKoZIzj0EAwIw
NDEgMAsGA1UEAwwEWmV0YTARBgNVBAsMCmFscGhhIFRlYW0xEDAOBgNVBAoMB0V4
YW1wbGUwIBcNMjYxMjAyMTg1NTM1WhgPMjEyNjExMDgxODU1MzVaMDQxIDALBgNV
BAMMBFpldGEwEQYDVQQLDAphbHBoYSBUZWFtMRAwDgYDVQQKDAdFeGFtcGxlMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9CW0hc+lSswMk+p6RQafAL9Y0GsXDR5Y
iNyuL23Q8844FSS40YAT84XQ8OAGsNanmMCt8ZVW+gHPkihxH0V1eaNTMFEwHQYD
VR0OBBYEFO5iD/IFKWn6QknhBMiUu5YV2sJQMB8GA1UdIwQYMBaAFO5iD/IFKWn6
QknhBMiUu5YV2sJQMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIh
AMJhDy+EVPz3CErbBQRiNzM4DxRgibdD35zDosea394sAiEAiJcfYu9oCrfSSd6c
OIDl4OoSmEbSqBUvaQnpGARz++k=
-----END CERTIFICATE-----";
    const UTF8: &str = "-----BEGIN CERTIFICATE-----
MIIBtzCCAV2gAwIBAgIUDLAkhiPx8NvV/sG7l2uMklNJcocwCgYIKoZIzj0EAwIw
MDEcMBoGA1UEAwwTRsWRICBUQU7DmlPDjVRWw4FOWTEQMA4GA1UECgwHTmV0TG9j
azAgFw0yNjEyMDIxODU1MzVaGA8yMTI2MTEwODE4NTUzNVowMDEcMBoGA1UEAwwT
RsWRICBUQU7DmlPDjVRWw4FOWTEQMA4GA1UECgwHTmV0TG9jazBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABPQltIXPpUrMDJPqekUGnwC/WNBrFw0eWIjcri9t0PPO
OBUkuNGAE/OF0PDgBrDWp5jArfGVVvoBz5IocR9FdXmjUzBRMB0GA1UdDgQWBBTu
Yg/yBSlp+kJJ4QTIlLuWFdrCUDAfBgNVHSMEGDAWgBTuYg/yBSlp+kJJ4QTIlLuW
FdrCUDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQCASngByVcc
RgDdLwaCkTq6tCJtcnjNUDrzL/YJonupcwIgAhKgSr7yM6Z6bxQJHAPmfKBtD8gu
OaAFWiLUUtTzn1M=
-----END CERTIFICATE-----";

    fn der(pem: &str) -> Vec<u8> {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }

    #[test]
    fn hashes_match_openssl() {
        let cases = [
            (PLAIN, "fffdbd1b", "plain"),
            (SPACES_PRINTABLE, "8d440bff", "spaces_printable"),
            (BMP, "801b4cfb", "bmp"),
            (MULTI, "bfd381b4", "multi"),
            (UTF8, "30bc3291", "utf8"),
        ];
        for (pem, expected, what) in cases {
            assert_eq!(of_certificate(&der(pem)).unwrap(), expected, "{what}");
        }
    }

    #[test]
    fn folding_trims_collapses_and_lowers_ascii_only() {
        assert_eq!(fold("  ACME   Widgets\tInc  "), "acme widgets inc");
        assert_eq!(fold("Fő  TANÚSÍTVÁNY"), "fő tanÚsÍtvÁny");
        assert_eq!(fold("\r\n"), "");
    }

    #[test]
    fn a_broken_subject_is_an_error() {
        let mut cert = der(PLAIN);
        cert.truncate(cert.len() - 10);
        assert!(of_certificate(&cert).is_err());
        // A BMPString of an odd length.
        let name = [
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x1e, 0x01, 0x41,
        ];
        assert_eq!(of_name(&name), Err(HashError::BadString("BMPString")));
    }
}
