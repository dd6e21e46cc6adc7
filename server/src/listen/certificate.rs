//! The TCP listener's own certificate, checked when the server starts: a
//! client refuses a CA certificate used as a server's (`CaUsedAsEndEntity`),
//! one out of date, or one without the server's names in its
//! subjectAltName, and says little about why. The server says it first,
//! naming the file and what to give instead.

use x509_parser::certificate::X509Certificate;
use x509_parser::time::ASN1Time;

/// What to give, for every refusal.
const WHAT_TO_GIVE: &str = "give the server a leaf certificate (basicConstraints CA:FALSE) with its \
     names in subjectAltName, signed by a CA its clients trust (docs/cli.md shows the openssl commands)";

/// Why the certificate (DER) a server was given cannot serve its clients.
pub fn check(der: &[u8]) -> Result<(), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the first certificate does not parse: {e}"))?;
    check_parsed(&cert, ASN1Time::now())
}

fn check_parsed(cert: &X509Certificate<'_>, now: ASN1Time) -> Result<(), String> {
    if cert.is_ca() {
        return Err(format!(
            "the first certificate is a CA's (basicConstraints CA:TRUE), which clients refuse \
             as a server's; {WHAT_TO_GIVE}"
        ));
    }
    let validity = cert.validity();
    if now < validity.not_before || now > validity.not_after {
        return Err(format!(
            "the first certificate is valid from {} to {}, not now; {WHAT_TO_GIVE}",
            validity.not_before, validity.not_after
        ));
    }
    let names = cert
        .subject_alternative_name()
        .map_err(|e| format!("its subjectAltName does not parse: {e}"))?;
    if names.is_none_or(|ext| ext.value.general_names.is_empty()) {
        return Err(format!(
            "the first certificate has no subjectAltName, and clients match the server's name \
             there only; {WHAT_TO_GIVE}"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    fn der(params: CertificateParams) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_leaf_with_names_serves_even_self_signed() {
        let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        assert_eq!(check(&der(params)), Ok(()));
    }

    #[test]
    fn a_ca_certificate_is_refused_saying_what_to_give() {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let why = check(&der(params)).unwrap_err();
        assert!(
            why.contains("CA:TRUE") && why.contains("leaf certificate"),
            "{why}"
        );
    }

    #[test]
    fn no_names_or_out_of_date_is_refused() {
        let params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let why = check(&der(params)).unwrap_err();
        assert!(why.contains("no subjectAltName"), "{why}");

        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2001, 1, 1);
        params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        let why = check(&der(params)).unwrap_err();
        assert!(why.contains("not now"), "{why}");
    }

    #[test]
    fn bytes_that_are_no_certificate_are_refused() {
        assert!(check(b"not DER").is_err());
    }
}
