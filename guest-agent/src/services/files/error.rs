//! What can go wrong in the `Files` service, and the gRPC code each error
//! deserves (used by `crate::error`, the one place statuses are made).

use std::io;

use tonic::Code;

use crate::services::process::ProcessError;

/// An error from a file operation. Messages name the path.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A system call on `path` failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done ("open", "rename", ...).
        op: &'static str,
        /// The path it was done to.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Paths must be absolute.
    #[error("path must be absolute: {0:?}")]
    RelativePath(String),
    /// A streamed call did not start with its header.
    #[error("the first message must be the header")]
    MissingHeader,
    /// A streamed call sent a second header.
    #[error("only the first message may be a header")]
    DuplicateHeader,
    /// A tar entry would land outside the target directory.
    #[error("tar entry {entry:?} would land outside {target}")]
    EscapingEntry {
        /// The entry's name as stored in the archive.
        entry: String,
        /// The target directory.
        target: String,
    },
    /// The uploaded bytes are not a valid tar archive.
    #[error("invalid tar stream")]
    BadTar(#[source] io::Error),
    /// `user` may not write where the call would write.
    #[error("user {user} may not write {path}")]
    UserDenied {
        /// The user the call runs as.
        user: String,
        /// The path it would write.
        path: String,
    },
    /// `user` could not be resolved.
    #[error(transparent)]
    User(#[from] ProcessError),
    /// A write stream ended before its `end` message.
    #[error("upload to {0} ended before its end message; nothing was written")]
    Truncated(String),
    /// The client's request stream failed.
    #[error("request stream failed: {0}")]
    Stream(String),
    /// A worker task died.
    #[error("file worker failed: {0}")]
    Worker(String),
    /// A snapshot needs at least one root.
    #[error("name at least one directory to snapshot")]
    NoRoots,
    /// No snapshot by that id (never taken, released, or forgotten to make
    /// room for newer ones).
    #[error("no snapshot {0}; take a new one")]
    NoSnapshot(String),
    /// `DownloadPaths` was given no path, or too many.
    #[error("download {0} paths: give 1 to {max}", max = airlock_proto::contract::changes::MAX_CHANGES)]
    PathCount(usize),
}

impl FilesError {
    /// An OS error on a path.
    pub fn io(op: &'static str, path: impl AsRef<std::path::Path>, source: io::Error) -> Self {
        FilesError::Io {
            op,
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// The gRPC code for this error.
    pub fn code(&self) -> Code {
        match self {
            FilesError::Io { source, .. } => io_code(source),
            FilesError::RelativePath(_)
            | FilesError::MissingHeader
            | FilesError::DuplicateHeader
            | FilesError::EscapingEntry { .. }
            | FilesError::BadTar(_)
            | FilesError::NoRoots
            | FilesError::PathCount(_) => Code::InvalidArgument,
            FilesError::NoSnapshot(_) => Code::NotFound,
            FilesError::UserDenied { .. } => Code::PermissionDenied,
            FilesError::User(ProcessError::UserNotFound(_) | ProcessError::GroupNotFound(_)) => {
                Code::NotFound
            }
            FilesError::User(_) => Code::InvalidArgument,
            FilesError::Stream(_) | FilesError::Truncated(_) => Code::Aborted,
            FilesError::Worker(_) => Code::Internal,
        }
    }
}

/// The code for an OS error: what the client can do about it.
fn io_code(e: &io::Error) -> Code {
    use nix::libc;
    match e.raw_os_error() {
        Some(libc::ENOENT) => Code::NotFound,
        Some(libc::EEXIST) => Code::AlreadyExists,
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => Code::PermissionDenied,
        Some(
            libc::EISDIR
            | libc::ENOTDIR
            | libc::ENOTEMPTY
            | libc::EXDEV
            | libc::ELOOP
            | libc::EBUSY,
        ) => Code::FailedPrecondition,
        Some(libc::EINVAL | libc::ENAMETOOLONG) => Code::InvalidArgument,
        Some(libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE) => Code::ResourceExhausted,
        _ => match e.kind() {
            io::ErrorKind::NotFound => Code::NotFound,
            io::ErrorKind::AlreadyExists => Code::AlreadyExists,
            io::ErrorKind::PermissionDenied => Code::PermissionDenied,
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => Code::InvalidArgument,
            _ => Code::Internal,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: i32) -> FilesError {
        FilesError::io("open", "/x", io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn os_errors_map_to_precise_codes() {
        use nix::libc;
        assert_eq!(os(libc::ENOENT).code(), Code::NotFound);
        assert_eq!(os(libc::EEXIST).code(), Code::AlreadyExists);
        assert_eq!(os(libc::EACCES).code(), Code::PermissionDenied);
        assert_eq!(os(libc::EISDIR).code(), Code::FailedPrecondition);
        assert_eq!(os(libc::ENOTEMPTY).code(), Code::FailedPrecondition);
        assert_eq!(os(libc::ENOTDIR).code(), Code::FailedPrecondition);
    }

    #[test]
    fn message_names_the_path() {
        assert!(os(nix::libc::ENOENT).to_string().contains("/x"));
    }
}
