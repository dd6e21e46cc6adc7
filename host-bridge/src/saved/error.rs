//! [`SavedError`]: what can go wrong with a saved sandbox's files.

use std::path::{Path, PathBuf};

use crate::error::Reason;

/// Errors of saved sandboxes.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot {path} refused: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot encode a snapshot's header or record: {0}")]
    Encode(String),
    #[error("no saved sandbox {id}")]
    NotSaved { id: String },
    #[error("snapshot {path} was written by QEMU {written_by}; this host runs QEMU {here}")]
    OtherQemu {
        path: PathBuf,
        written_by: String,
        here: String,
    },
    #[error("sandbox {id} has no snapshot that passes its checks: {reasons}")]
    NoGoodSnapshot { id: String, reasons: String },
}

impl SavedError {
    pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SavedError + '_ {
        move |source| SavedError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl SavedError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            SavedError::NotSaved { .. } => Reason::SandboxNotFound,
            SavedError::Io { .. }
            | SavedError::Corrupt { .. }
            | SavedError::Encode(_)
            | SavedError::OtherQemu { .. }
            | SavedError::NoGoodSnapshot { .. } => Reason::Internal,
        }
    }
}
