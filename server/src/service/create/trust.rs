//! The trust section of a create: `ca_certs`, roots the guest trusts
//! besides its image's, checked as the CLI's `--ca-cert` is.

use tonic::Status;

use airlock::CaCert;
use airlock_api::limits;
use airlock_api::reason::invalid;

use crate::validate;

/// The certificates of `ca_certs` (PEM texts, each one or more): bounded
/// in number and size, each X.509, valid now and a CA.
pub fn ca_certs(pems: &[String]) -> Result<Vec<CaCert>, Status> {
    validate::count("ca_certs", pems, limits::MAX_CA_CERTS)?;
    let mut ca_certs = Vec::new();
    for (index, pem) in pems.iter().enumerate() {
        if pem.len() > limits::MAX_CA_CERT_BYTES {
            return Err(invalid(
                "ca_certs",
                format!(
                    "entry {}: longer than {} bytes",
                    index + 1,
                    limits::MAX_CA_CERT_BYTES
                ),
            ));
        }
        let certs = CaCert::from_pem(pem)
            .map_err(|error| invalid("ca_certs", format!("entry {}: {error}", index + 1)))?;
        ca_certs.extend(certs);
    }
    Ok(ca_certs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    #[test]
    fn none_is_none_and_a_bad_entry_is_named_by_its_place() {
        assert!(ca_certs(&[]).unwrap().is_empty());
        let refused = ca_certs(&["not a certificate".to_owned()]).unwrap_err();
        assert_eq!(field_of(&refused), Some("ca_certs"));
        assert!(refused.message().contains("entry 1: "), "{refused:?}");
        let long = "x".repeat(limits::MAX_CA_CERT_BYTES + 1);
        let refused = ca_certs(&[long]).unwrap_err();
        assert!(
            refused.message().contains("entry 1: longer than"),
            "{refused:?}"
        );
        let many = vec![String::new(); limits::MAX_CA_CERTS + 1];
        assert_eq!(field_of(&ca_certs(&many).unwrap_err()), Some("ca_certs"));
    }
}
