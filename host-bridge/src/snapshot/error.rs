//! [`SnapshotStoreError`]: what the store of snapshots can fail with.

use std::path::PathBuf;

/// Errors of the snapshot store.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotStoreError {
    #[error("no snapshot {0}")]
    NotFound(String),
    #[error("snapshot {id} is unreadable: {reason}")]
    Corrupt { id: String, reason: String },
    #[error("snapshots: i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SnapshotStoreError {
    /// What this error is about.
    pub fn reason(&self) -> crate::error::Reason {
        match self {
            SnapshotStoreError::NotFound(_) => crate::error::Reason::NotFound,
            SnapshotStoreError::Corrupt { .. } | SnapshotStoreError::Io { .. } => {
                crate::error::Reason::Internal
            }
        }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| SnapshotStoreError::Io {
            path: path.to_owned(),
            source,
        }
    }
}
