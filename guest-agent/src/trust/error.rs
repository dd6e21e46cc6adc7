//! The errors of `System.TrustRoots`: a request that cannot be honoured,
//! or a step of installing the roots that failed.

use std::path::PathBuf;

use airlock_proto::contract::trust::{MAX_ROOTS, MAX_ROOT_BYTES, MAX_TOTAL_BYTES};
use nix::errno::Errno;

use super::der::DerError;

/// A request that cannot be honoured, or a step that failed.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// No certificates.
    #[error("no certificates to trust")]
    Empty,
    /// Too many certificates, or too many bytes of them.
    #[error(
        "{count} certificates of {bytes} bytes are too many; at most {MAX_ROOTS} of \
         {MAX_TOTAL_BYTES} bytes together are taken"
    )]
    TooMany {
        /// How many were sent.
        count: usize,
        /// Their size together.
        bytes: usize,
    },
    /// A certificate is not one.
    #[error("certificate {index} is not an X.509 certificate")]
    NotACertificate {
        /// Its place in the request, from 1.
        index: usize,
        /// What the reader found.
        #[source]
        source: DerError,
    },
    /// A certificate is larger than [`MAX_ROOT_BYTES`].
    #[error("certificate {index} is {bytes} bytes; at most {MAX_ROOT_BYTES} are taken")]
    TooLarge {
        /// Its place in the request, from 1.
        index: usize,
        /// Its size.
        bytes: usize,
    },
    /// A directory could not be made.
    #[error("cannot create {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A mount failed.
    #[error("cannot mount {what} on {target}")]
    Mount {
        /// What was being mounted.
        what: &'static str,
        /// The mount point.
        target: String,
        /// The errno.
        #[source]
        source: Errno,
    },
    /// A file of the store could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A file of the store could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}")]
pub struct StoreError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}
