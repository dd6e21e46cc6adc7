//! TLS that failed over trust, where the host can see it: on a connection
//! to a secret-bound host the host is both the guest's TLS server and the
//! upstream's TLS client, so it sees the upstream's certificate refused for
//! an unknown issuer (a private CA, or a TLS-inspecting proxy between the
//! host and the server) and the guest's program refusing the sandbox's CA
//! (a runtime with roots of its own). Connections the host only passes
//! through keep these to the guest: TLS 1.3 encrypts the certificate and
//! the alert.

use std::io;

use rustls::{AlertDescription, CertificateError};

use super::upstream::UpstreamError;

/// A TLS handshake that failed because a side did not trust the other's
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// The upstream server's certificate chains to no root the host trusts.
    Upstream {
        /// What rustls said.
        detail: String,
    },
    /// The guest's program refused the certificate the host presented,
    /// issued by the sandbox's CA.
    Guest {
        /// The TLS alert it sent.
        alert: String,
    },
}

/// Whether `error` is the upstream's certificate refused for its issuer.
pub fn of_upstream(error: &UpstreamError) -> Option<Untrusted> {
    let UpstreamError::Handshake { source, .. } = error else {
        return None;
    };
    match rustls_error(source)? {
        rustls::Error::InvalidCertificate(reason @ CertificateError::UnknownIssuer) => {
            Some(Untrusted::Upstream {
                detail: format!("{reason:?}"),
            })
        }
        _ => None,
    }
}

/// Whether the guest's side of a TLS handshake (`error`) ended with an
/// alert that refuses the host's certificate.
pub fn of_guest_handshake(error: &io::Error) -> Option<Untrusted> {
    match rustls_error(error)? {
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown),
        ) => Some(Untrusted::Guest {
            alert: format!("{alert:?}"),
        }),
        _ => None,
    }
}

/// The rustls error inside an I/O error of tokio-rustls.
fn rustls_error(error: &io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn an_unknown_issuer_upstream_is_told_apart() {
        let handshake = |error| UpstreamError::Handshake {
            server_name: "api.test".into(),
            source: io(error),
        };
        let unknown = handshake(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert_eq!(
            of_upstream(&unknown),
            Some(Untrusted::Upstream {
                detail: "UnknownIssuer".into()
            })
        );
        let expired = handshake(rustls::Error::InvalidCertificate(CertificateError::Expired));
        assert_eq!(of_upstream(&expired), None);
        let other = UpstreamError::ServerName("x".into());
        assert_eq!(of_upstream(&other), None);
    }

    #[test]
    fn a_guest_refusing_the_sandbox_certificate_is_told_apart() {
        let refused = io(rustls::Error::AlertReceived(AlertDescription::UnknownCA));
        assert_eq!(
            of_guest_handshake(&refused),
            Some(Untrusted::Guest {
                alert: "UnknownCA".into()
            })
        );
        let gone = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(of_guest_handshake(&gone), None);
    }
}
