//! Throwaway TLS certificates: a CA made for one test and a certificate it
//! signed for the names the test serves. Both carry a common name, so
//! OpenSSL-based clients (Python's ssl, curl, Node) do not take the
//! certificate, whose issuer would otherwise be its own (empty) subject,
//! for a self-signed one. [`Issued::acceptor`] serves the certificate on
//! the test's own TLS servers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA and a certificate it issued.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The CA's certificate, PEM.
    pub ca_pem: String,
    /// The CA's certificate, DER.
    pub ca_der: Vec<u8>,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The certificate's private key, PEM.
    pub key_pem: String,
    /// The certificate's private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
}

/// A new CA named `ca_name`, and a certificate for `names` (DNS names or
/// IP addresses; the first is its common name) that it signed.
pub fn issue(ca_name: &str, names: &[&str]) -> Issued {
    let fail = |what: &str, e: rcgen::Error| -> ! { panic!("test certificates: {what}: {e}") };
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| fail("CA", e));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_key = KeyPair::generate().unwrap_or_else(|e| fail("CA key", e));
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap_or_else(|e| fail("CA", e));
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap_or_else(|e| fail("certificate", e));
    if let Some(first) = names.first() {
        params.distinguished_name.push(DnType::CommonName, *first);
    }
    let key = KeyPair::generate().unwrap_or_else(|e| fail("key", e));
    let cert = params
        .signed_by(&key, &ca)
        .unwrap_or_else(|e| fail("certificate", e));
    Issued {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        cert_pem: cert.pem(),
        cert_der: cert.der().to_vec(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

impl Issued {
    /// A TLS acceptor (rustls, the ring provider) presenting the
    /// certificate.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let key = rustls::pki_types::PrivateKeyDer::try_from(self.key_der.clone())
            .unwrap_or_else(|e| panic!("test key: {e}"));
        let cert = rustls::pki_types::CertificateDer::from(self.cert_der.clone());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .and_then(|builder| {
            builder
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
        })
        .unwrap_or_else(|e| panic!("test server TLS config: {e}"));
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// The PEM files of [`write_files`].
#[derive(Debug, Clone)]
pub struct Files {
    /// The CA's certificate (`ca.pem`).
    pub ca: PathBuf,
    /// The certificate (`server.pem`).
    pub cert: PathBuf,
    /// Its key (`server.key`).
    pub key: PathBuf,
}

/// A throwaway CA and a certificate for `names` it signed, written to
/// `dir` as `ca.pem`, `server.pem` and `server.key`.
pub fn write_files(dir: &Path, names: &[&str]) -> Files {
    let issued = issue("airlock test CA", names);
    let files = Files {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    for (path, text) in [
        (&files.ca, &issued.ca_pem),
        (&files.cert, &issued.cert_pem),
        (&files.key, &issued.key_pem),
    ] {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    files
}
