//! The errors of adoption: [`AdoptError`] (why a sandbox could not be
//! adopted or detached) and [`RecordError`] (its adoption record's file).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::ErrorKind;
use crate::error::Reason;
use crate::state_dir::owner::RecordError as OwnerRecordError;

/// Why a sandbox could not be adopted (or detached).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdoptError {
    /// No sandbox by that id under the state directory base.
    #[error("no sandbox {id} under {base}; airlock::adopt::orphans lists the ones to adopt")]
    NoSuchSandbox { id: String, base: PathBuf },
    /// The sandbox was not started adoptable (or is a pool member not yet
    /// handed out).
    #[error(
        "sandbox {id} was not started adoptable (SandboxBuilder::adoptable), so it cannot be \
         adopted or detached"
    )]
    NotAdoptable { id: String },
    /// Its owner still runs and holds it.
    #[error(
        "sandbox {id} is held by process {pid}; adopt it once that process ends or detaches it"
    )]
    Held { id: String, pid: u32 },
    /// Another process (or task) is adopting it right now.
    #[error("sandbox {id} is being adopted by another process")]
    Busy { id: String },
    /// Its VM no longer runs.
    #[error(
        "sandbox {id}'s VM no longer runs; `airlock gc` removes what is left (a sandbox saved \
         to disk is restored, not adopted)"
    )]
    VmGone { id: String },
    /// Its lifetime ceiling passed while nobody held it.
    #[error("sandbox {id} outlived its lifetime ceiling of {limit:?} while nobody held it; `airlock gc` ends it")]
    LifetimeEnded { id: String, limit: Duration },
    /// Its owner ran in another pid namespace: nothing here can tell
    /// whether it lives.
    #[error("sandbox {id}'s owner ran in another pid namespace; adopt it from there")]
    OtherPidNamespace { id: String },
    /// Its owner record cannot be read.
    #[error("sandbox {id}'s owner record")]
    Owner {
        id: String,
        #[source]
        source: OwnerRecordError,
    },
    /// Its adoption record cannot be read or written.
    #[error("sandbox {id}'s adoption record")]
    Record {
        id: String,
        #[source]
        source: RecordError,
    },
    /// A file of its state directory (the adoption lock, the owner record).
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AdoptError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            AdoptError::NoSuchSandbox { .. } | AdoptError::VmGone { .. } => Reason::SandboxNotFound,
            AdoptError::NotAdoptable { .. }
            | AdoptError::Held { .. }
            | AdoptError::OtherPidNamespace { .. } => Reason::Unsupported,
            AdoptError::LifetimeEnded { .. } => Reason::SandboxEnded,
            AdoptError::Busy { .. } => Reason::Interrupted,
            AdoptError::Owner { .. } | AdoptError::Record { .. } | AdoptError::Io { .. } => {
                Reason::Internal
            }
        }
    }

    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        self.reason().kind()
    }
}

/// Errors reading or writing an adoption record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an adoption record")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path} has record version {version}, not {expected}; adopt it with the airlock \
         that wrote it"
    )]
    Version {
        path: PathBuf,
        version: u32,
        expected: u32,
    },
    #[error("{path} is not a private file of this user (owner and mode 0600); refusing it")]
    NotPrivate { path: PathBuf },
}

impl RecordError {
    /// The record does not exist: the sandbox is not adoptable.
    pub fn is_missing(&self) -> bool {
        matches!(self, RecordError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}
