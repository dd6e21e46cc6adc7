//! [`WorkspaceError`]: why a workspace could not be attached or removed.

use std::path::PathBuf;

use crate::error::Reason;

/// Errors attaching a workspace.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// Another sandbox holds the workspace.
    #[error("workspace {0} is in use by another sandbox; wait for it to finish or use another workspace")]
    Busy(PathBuf),
    /// The file exists but holds no ext4 filesystem.
    #[error("{0} is not an Airlock workspace (no ext4 filesystem); remove it or name a new file")]
    NotExt4(PathBuf),
    /// The requested size is too small.
    #[error("workspace size {0} bytes is too small; use at least 16 MiB")]
    TooSmall(u64),
    /// The file could not be opened, sized or read.
    #[error("cannot {action} workspace {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The workspace file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// There is no workspace file there.
    #[error("no workspace {0}")]
    Missing(PathBuf),
    /// `mkfs.ext4` could not be run.
    #[error("cannot run {program} to format workspace {path}; install Debian's e2fsprogs")]
    Mkfs {
        /// The workspace file.
        path: PathBuf,
        /// The `mkfs.ext4` it tried.
        program: PathBuf,
        /// Why it could not run.
        #[source]
        source: std::io::Error,
    },
    /// `mkfs.ext4` failed.
    #[error(
        "cannot format workspace {path} with mkfs.ext4 (install Debian's e2fsprogs): {detail}"
    )]
    Format {
        /// The workspace file.
        path: PathBuf,
        /// What mkfs.ext4 said.
        detail: String,
    },
}

impl WorkspaceError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            WorkspaceError::Busy(_) => Reason::Unsupported,
            WorkspaceError::Missing(_) => Reason::NotFound,
            WorkspaceError::NotExt4(_) | WorkspaceError::TooSmall(_) => Reason::Invalid,
            WorkspaceError::Io { .. }
            | WorkspaceError::Mkfs { .. }
            | WorkspaceError::Format { .. } => Reason::Internal,
        }
    }
}
