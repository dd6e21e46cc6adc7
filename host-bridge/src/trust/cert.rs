//! [`CaCert`]: a CA certificate a sandbox trusts, checked when it is made.
//!
//! PEM text is split into its blocks here ([`pem_blocks`]); each
//! `CERTIFICATE` block is parsed with x509-parser and must be valid now
//! and be a CA (basic constraints `cA`) or self-signed, and rustls must
//! accept it as a trust anchor (the host's own upstream checks use it). A
//! private key, another kind of PEM block, DER given as if it were PEM, an
//! expired certificate or a server's certificate is an error naming where
//! it came from (a path, or "the PEM text") and what to give instead.

use std::fmt;
use std::path::Path;

use base64::Engine;
use rustls::pki_types::CertificateDer;
use x509_parser::certificate::X509Certificate;
use x509_parser::time::ASN1Time;

use airlock_proto::contract::trust::{MAX_ROOTS, MAX_ROOT_BYTES};

use super::error::CaCertError;
use super::origin::Origin;

/// The most bytes of PEM read from one file.
const MAX_PEM_BYTES: u64 = 8 << 20;

/// A CA certificate that a sandbox's guest trusts besides (or instead of)
/// its image's roots, and that the host trusts when it checks the servers
/// of secret-bound hosts.
///
/// Made from PEM ([`CaCert::from_pem`], [`CaCert::from_pem_file`]) or DER
/// ([`CaCert::from_der`]), each of which checks it: an X.509 certificate,
/// valid now, a CA (or self-signed), usable by rustls as a root.
#[derive(Clone, PartialEq, Eq)]
pub struct CaCert {
    der: CertificateDer<'static>,
    subject: String,
}

impl fmt::Debug for CaCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaCert")
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

impl CaCert {
    /// Every certificate in PEM `text` (one or more), checked.
    pub fn from_pem(text: &str) -> Result<Vec<CaCert>, CaCertError> {
        parse_pem(text.as_bytes(), &Origin::Text, Strictness::Checked)
    }

    /// Every certificate in the PEM file at `path` (one or more), checked;
    /// errors name the file.
    pub fn from_pem_file(path: impl AsRef<Path>) -> Result<Vec<CaCert>, CaCertError> {
        let path = path.as_ref();
        let origin = Origin::File(path.to_owned());
        parse_pem(&read_limited(path, &origin)?, &origin, Strictness::Checked)
    }

    /// One certificate in DER, checked.
    pub fn from_der(der: impl Into<Vec<u8>>) -> Result<CaCert, CaCertError> {
        check(der.into(), &Origin::Text, 1, Strictness::Checked)
    }

    /// The certificate, DER.
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// Its subject, as `CN=..., O=...`.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The certificate as PEM.
    pub fn to_pem(&self) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(self.der.as_ref());
        let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
        pem
    }
}

/// How much a certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strictness {
    /// Everything: what a user gives.
    Checked,
    /// Only that it parses and rustls takes it: the host's own store, taken
    /// as it is (its expired roots harm no one; they match nothing).
    AsTheHostHasIt,
}

/// Reads a file of at most [`MAX_PEM_BYTES`].
pub(super) fn read_limited(path: &Path, origin: &Origin) -> Result<Vec<u8>, CaCertError> {
    let read = |source| CaCertError::Read {
        path: path.to_owned(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(read)?.len();
    if bytes > MAX_PEM_BYTES {
        return Err(CaCertError::TooLarge {
            origin: origin.clone(),
            bytes,
        });
    }
    std::fs::read(path).map_err(read)
}

/// The certificates of PEM `bytes`.
pub(super) fn parse_pem(
    bytes: &[u8],
    origin: &Origin,
    strictness: Strictness,
) -> Result<Vec<CaCert>, CaCertError> {
    let text = String::from_utf8_lossy(bytes);
    let mut certs = Vec::new();
    let mut index = 0;
    for block in pem_blocks(&text) {
        let (label, body) = match block {
            Ok(block) => block,
            Err(detail) => {
                return Err(CaCertError::Malformed {
                    origin: origin.clone(),
                    index: index + 1,
                    detail,
                })
            }
        };
        if label.contains("PRIVATE KEY") {
            return Err(CaCertError::PrivateKey {
                origin: origin.clone(),
                label: label.to_owned(),
            });
        }
        if label != "CERTIFICATE" {
            if strictness == Strictness::AsTheHostHasIt {
                continue;
            }
            return Err(CaCertError::OtherBlock {
                origin: origin.clone(),
                label: label.to_owned(),
            });
        }
        index += 1;
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|e| CaCertError::Malformed {
                origin: origin.clone(),
                index,
                detail: format!("its base64 does not decode ({e})"),
            })?;
        match check(der, origin, index, strictness) {
            Ok(cert) => certs.push(cert),
            Err(error) if strictness == Strictness::AsTheHostHasIt => {
                tracing::warn!(error = %crate::error_chain(&error), "a root of the host's store is left out");
            }
            Err(error) => return Err(error),
        }
    }
    if certs.is_empty() {
        let hint = match bytes.first() {
            // A DER SEQUENCE: a certificate in binary form.
            Some(0x30) => {
                "; it looks like DER: convert it with \
                           `openssl x509 -inform der -in FILE -out FILE.pem`"
            }
            _ => "",
        };
        return Err(CaCertError::NoCertificate {
            origin: origin.clone(),
            hint,
        });
    }
    if certs.len() > MAX_ROOTS {
        return Err(CaCertError::TooMany {
            origin: origin.clone(),
            count: certs.len(),
        });
    }
    Ok(certs)
}

/// The PEM blocks of `text`: each block's label and its base64 body (white
/// space removed), or what is wrong with it. Text outside blocks is
/// ignored, as OpenSSL ignores it.
fn pem_blocks(text: &str) -> impl Iterator<Item = Result<(&str, String), String>> + '_ {
    let mut lines = text.lines();
    std::iter::from_fn(move || {
        let label = lines.by_ref().find_map(|line| {
            line.trim()
                .strip_prefix("-----BEGIN ")
                .and_then(|rest| rest.strip_suffix("-----"))
        })?;
        let mut body = String::new();
        for line in lines.by_ref() {
            let line = line.trim();
            if let Some(end) = line
                .strip_prefix("-----END ")
                .and_then(|rest| rest.strip_suffix("-----"))
            {
                if end != label {
                    return Some(Err(format!(
                        "-----BEGIN {label}----- ends with -----END {end}-----"
                    )));
                }
                return Some(Ok((label, body)));
            }
            // RFC 1421 headers (`Proc-Type: ...`, in encrypted keys) are
            // no base64.
            if !line.contains(':') {
                body.extend(line.split_whitespace());
            }
        }
        Some(Err(format!("-----BEGIN {label}----- has no END line")))
    })
}

/// Checks one certificate (DER).
fn check(
    der: Vec<u8>,
    origin: &Origin,
    index: usize,
    strictness: Strictness,
) -> Result<CaCert, CaCertError> {
    let malformed = |detail: String| CaCertError::Malformed {
        origin: origin.clone(),
        index,
        detail,
    };
    if der.len() > MAX_ROOT_BYTES {
        return Err(malformed(format!(
            "it is {} bytes; a certificate is at most {MAX_ROOT_BYTES}",
            der.len()
        )));
    }
    let (rest, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(malformed("bytes follow the certificate".to_owned()));
    }
    let subject = name_of(&cert, true);
    if strictness == Strictness::Checked {
        check_validity(&cert, origin, index, &subject)?;
        let self_signed = cert.subject().as_raw() == cert.issuer().as_raw();
        if !cert.is_ca() && !self_signed {
            return Err(CaCertError::NotACa {
                origin: origin.clone(),
                index,
                subject,
                issuer: name_of(&cert, false),
            });
        }
    }
    let der = CertificateDer::from(der);
    rustls::RootCertStore::empty()
        .add(der.clone())
        .map_err(|source| CaCertError::Unusable {
            origin: origin.clone(),
            index,
            subject: subject.clone(),
            source: Box::new(source),
        })?;
    Ok(CaCert { der, subject })
}

fn check_validity(
    cert: &X509Certificate<'_>,
    origin: &Origin,
    index: usize,
    subject: &str,
) -> Result<(), CaCertError> {
    let validity = cert.validity();
    let now = ASN1Time::now();
    if now > validity.not_after {
        return Err(CaCertError::Expired {
            origin: origin.clone(),
            index,
            subject: subject.to_owned(),
            not_after: validity.not_after.to_string(),
        });
    }
    if now < validity.not_before {
        return Err(CaCertError::NotYetValid {
            origin: origin.clone(),
            index,
            subject: subject.to_owned(),
            not_before: validity.not_before.to_string(),
        });
    }
    Ok(())
}

/// The certificate's subject (or issuer) as text, or a stand-in.
fn name_of(cert: &X509Certificate<'_>, subject: bool) -> String {
    let name = if subject {
        cert.subject()
    } else {
        cert.issuer()
    };
    let text = name.to_string();
    if text.is_empty() {
        "no name".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ca(
        name: &str,
        not_after: (i32, u8, u8),
    ) -> (String, rcgen::KeyPair, rcgen::CertificateParams) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let pem = params.self_signed(&key).unwrap().pem();
        (pem, key, params)
    }

    #[test]
    fn one_or_more_certificates_are_read_with_text_around_them() {
        let (a, ..) = ca("First Test CA", (2099, 1, 1));
        let (b, ..) = ca("Second Test CA", (2099, 1, 1));
        let text = format!("# our roots\n{a}\nsome words\n{b}");
        let certs = CaCert::from_pem(&text).unwrap();
        let subjects: Vec<_> = certs.iter().map(CaCert::subject).collect();
        assert_eq!(subjects, ["CN=First Test CA", "CN=Second Test CA"]);
        assert_eq!(CaCert::from_pem(&certs[0].to_pem()).unwrap(), certs[..1]);
        assert_eq!(CaCert::from_der(certs[1].der().to_vec()).unwrap(), certs[1]);
    }

    #[test]
    fn a_key_is_refused_and_named() {
        let (cert, key, _) = ca("Test CA", (2099, 1, 1));
        let error = CaCert::from_pem(&key.serialize_pem())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("private key (-----BEGIN PRIVATE KEY-----)"),
            "{error}"
        );
        let both = format!("{cert}{}", key.serialize_pem());
        assert!(matches!(
            CaCert::from_pem(&both),
            Err(CaCertError::PrivateKey { .. })
        ));
    }

    #[test]
    fn text_that_is_not_pem_is_refused_and_der_is_recognised() {
        let error = CaCert::from_pem("hello").unwrap_err().to_string();
        assert_eq!(
            error,
            "the PEM text holds no PEM certificate (a block starting -----BEGIN CERTIFICATE-----)"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.der");
        let (cert, ..) = ca("Test CA", (2099, 1, 1));
        let der = CaCert::from_pem(&cert).unwrap()[0].der().to_vec();
        std::fs::write(&path, der).unwrap();
        let error = CaCert::from_pem_file(&path).unwrap_err().to_string();
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        assert!(error.contains("openssl x509 -inform der"), "{error}");
        let broken = cert.replace("MII", "M!I");
        assert!(matches!(
            CaCert::from_pem(&broken),
            Err(CaCertError::Malformed { index: 1, .. })
        ));
        let missing = dir.path().join("nowhere.pem");
        let error = CaCert::from_pem_file(&missing).unwrap_err().to_string();
        assert!(error.contains("nowhere.pem"), "{error}");
    }

    #[test]
    fn an_expired_ca_is_refused_with_its_date() {
        let (cert, ..) = ca("Old Test CA", (2021, 6, 1));
        let error = CaCert::from_pem(&cert).unwrap_err().to_string();
        assert!(error.contains("CN=Old Test CA"), "{error}");
        assert!(error.contains("expired on Jun  1"), "{error}");
        // The host's own store is taken as it is.
        let certs = parse_pem(cert.as_bytes(), &Origin::Text, Strictness::AsTheHostHasIt).unwrap();
        assert_eq!(certs.len(), 1);
    }

    #[test]
    fn a_server_certificate_is_refused_naming_its_issuer() {
        let (_, ca_key, ca_params) = ca("Issuing Test CA", (2099, 1, 1));
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["server.test".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let error = CaCert::from_pem(&leaf.pem()).unwrap_err().to_string();
        assert!(error.contains("not a CA certificate"), "{error}");
        assert!(error.contains("issued by CN=Issuing Test CA"), "{error}");
    }
}
