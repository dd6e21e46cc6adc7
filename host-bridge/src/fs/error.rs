//! What can go wrong on the host side of a file transfer.

use std::path::PathBuf;

use crate::error::Reason;

/// A host-side file transfer error (the agent's refusals are
/// [`crate::Error::Agent`]).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A host file or directory could not be used.
    #[error("cannot {op} {}", path.display())]
    Local {
        /// What was being done.
        op: &'static str,
        /// The host path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A directory transfer needs a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Guest paths travel as UTF-8.
    #[error("guest path is not UTF-8: {}", .0.display())]
    NonUtf8Path(PathBuf),
    /// A downloaded tar entry would land outside the target directory.
    #[error("tar entry {entry:?} would land outside {}", target.display())]
    EscapingEntry {
        /// The entry's name in the archive.
        entry: String,
        /// The host target directory.
        target: PathBuf,
    },
    /// The downloaded bytes are not a valid tar archive.
    #[error("invalid tar stream from the guest")]
    BadTar(#[source] std::io::Error),
    /// A guest path leads through more symlinks than a download follows.
    #[error("{}: more than {limit} symlinks on the way to a file", path.display())]
    SymlinkLoop {
        /// The guest path.
        path: PathBuf,
        /// How many a download follows.
        limit: usize,
    },
    /// A worker task died.
    #[error("file transfer worker failed")]
    Worker(#[source] tokio::task::JoinError),
    /// The tar stream being unpacked failed (its error, as it displays).
    #[error("the tar stream failed: {0}")]
    Stream(String),
}

impl FsError {
    pub(crate) fn local(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        FsError::Local {
            op,
            path: path.into(),
            source,
        }
    }
}

impl FsError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            FsError::EscapingEntry { .. } | FsError::NonUtf8Path(_) => Reason::Invalid,
            FsError::NotADirectory(_) => Reason::GuestRefused,
            FsError::Local { .. }
            | FsError::BadTar(_)
            | FsError::SymlinkLoop { .. }
            | FsError::Worker(_)
            | FsError::Stream(_) => Reason::Internal,
        }
    }
}
