//! The errors of CA certificates: [`CaCertError`] (one certificate),
//! [`HostStoreError`] (the host's store) and [`TrustError`] (the roots of
//! a start).

use std::path::PathBuf;

use airlock_proto::contract::trust::{MAX_ROOTS, MAX_TOTAL_BYTES};

use super::origin::{Origin, CA_CERTS_ENV};
use crate::error::Reason;

/// A certificate that cannot be trusted as given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaCertError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any certificate file.
    #[error("{origin} is {bytes} bytes, too large for a file of CA certificates")]
    TooLarge {
        /// Where.
        origin: Origin,
        /// Its size.
        bytes: u64,
    },
    /// No PEM certificate at all.
    #[error(
        "{origin} holds no PEM certificate (a block starting -----BEGIN CERTIFICATE-----){hint}"
    )]
    NoCertificate {
        /// Where.
        origin: Origin,
        /// What it looks like instead, if that can be told.
        hint: &'static str,
    },
    /// A private key where a certificate belongs.
    #[error(
        "{origin} holds a private key (-----BEGIN {label}-----); give only the CA's \
         certificate (-----BEGIN CERTIFICATE-----), never a key"
    )]
    PrivateKey {
        /// Where.
        origin: Origin,
        /// The PEM label.
        label: String,
    },
    /// Another kind of PEM block.
    #[error("{origin} holds a {label}, not a certificate; give the CA's certificate")]
    OtherBlock {
        /// Where.
        origin: Origin,
        /// The PEM label.
        label: String,
    },
    /// A block that is not valid PEM or not an X.509 certificate.
    #[error("certificate {index} in {origin} is not a valid X.509 certificate: {detail}")]
    Malformed {
        /// Where.
        origin: Origin,
        /// Its place among the file's certificates, from 1.
        index: usize,
        /// What is wrong.
        detail: String,
    },
    /// The certificate has expired.
    #[error(
        "certificate {index} in {origin} ({subject}) expired on {not_after}; \
         give the CA's current certificate"
    )]
    Expired {
        /// Where.
        origin: Origin,
        /// Its place among the file's certificates, from 1.
        index: usize,
        /// Its subject.
        subject: String,
        /// When it expired.
        not_after: String,
    },
    /// The certificate is not valid yet.
    #[error(
        "certificate {index} in {origin} ({subject}) is not valid before {not_before}; \
         check the host's clock or give the CA's current certificate"
    )]
    NotYetValid {
        /// Where.
        origin: Origin,
        /// Its place among the file's certificates, from 1.
        index: usize,
        /// Its subject.
        subject: String,
        /// When it becomes valid.
        not_before: String,
    },
    /// A certificate issued by a CA for something else (a server, say).
    #[error(
        "certificate {index} in {origin} ({subject}) is not a CA certificate: it was issued \
         by {issuer}; give that CA's certificate instead"
    )]
    NotACa {
        /// Where.
        origin: Origin,
        /// Its place among the file's certificates, from 1.
        index: usize,
        /// Its subject.
        subject: String,
        /// Its issuer.
        issuer: String,
    },
    /// rustls does not take the certificate as a trust anchor.
    #[error("certificate {index} in {origin} ({subject}) cannot be used as a root")]
    Unusable {
        /// Where.
        origin: Origin,
        /// Its place among the file's certificates, from 1.
        index: usize,
        /// Its subject.
        subject: String,
        /// What rustls said.
        #[source]
        source: Box<rustls::Error>,
    },
    /// More certificates than a guest takes.
    #[error("{origin} holds {count} certificates; a sandbox takes at most {MAX_ROOTS}")]
    TooMany {
        /// Where.
        origin: Origin,
        /// How many.
        count: usize,
    },
}

/// The host has no bundle where one is looked for.
#[derive(Debug, thiserror::Error)]
#[error(
    "this host has no system trust store (looked at {tried}); install Debian's ca-certificates, \
     or set SSL_CERT_FILE to a bundle"
)]
pub struct NoHostStore {
    /// The places looked at.
    pub tried: String,
}

/// Why the host's roots could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostStoreError {
    /// No bundle.
    #[error(transparent)]
    Missing(#[from] NoHostStore),
    /// The bundle could not be read, or holds no certificate.
    #[error(transparent)]
    Bundle(#[from] CaCertError),
}

/// The roots of a start could not be gathered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// A certificate that cannot be trusted.
    #[error(transparent)]
    Cert(#[from] CaCertError),
    /// The host's store could not be read.
    #[error(transparent)]
    HostStore(#[from] HostStoreError),
    /// What [`CA_CERTS_ENV`] names cannot be used.
    #[error("{CA_CERTS_ENV}: {0}")]
    FromEnv(Box<TrustError>),
    /// More than a guest takes.
    #[error(
        "{count} CA certificates of {bytes} bytes are more than a sandbox takes \
         (at most {MAX_ROOTS} of {MAX_TOTAL_BYTES} bytes together)"
    )]
    TooMany {
        /// How many.
        count: usize,
        /// Their size together (DER).
        bytes: usize,
    },
}

impl TrustError {
    /// What this error is about (see [`Reason`]): certificates that
    /// cannot be used as given.
    pub fn reason(&self) -> Reason {
        match self {
            TrustError::Cert(_)
            | TrustError::HostStore(_)
            | TrustError::FromEnv(_)
            | TrustError::TooMany { .. } => Reason::Invalid,
        }
    }
}
