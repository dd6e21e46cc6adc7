//! [`VmmError`]: why a VMM process or its vsock helper could not be
//! started or controlled.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Reason;

/// Errors starting or controlling the VMM processes.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    #[error("{name} not found (set {env} or {hint})")]
    ProgramNotFound {
        name: &'static str,
        env: &'static str,
        hint: &'static str,
    },
    #[error("cannot start {program}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path}")]
    LogFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("vhost-device-vsock did not create {socket} within {timeout:?}; its log:\n{log}")]
    DeviceNotReady {
        socket: PathBuf,
        timeout: Duration,
        log: String,
    },
    #[error("the vsock device exited ({status}); its log:\n{log}")]
    DeviceExited { status: String, log: String },
    #[error("QEMU has already exited")]
    Exited,
    #[error("cannot tell the version of {program} from {output:?}")]
    Version { program: PathBuf, output: String },
    #[error("cannot signal QEMU")]
    Signal(#[source] nix::Error),
    #[error("cannot take over the VMM process")]
    Adopt(#[source] std::io::Error),
    #[error("waiting for a VMM process")]
    Wait(#[source] std::io::Error),
    #[error("running the VMM as uid {uid} needs root; use VmmUser::Caller")]
    UserNeedsRoot { uid: u32 },
    #[error(
        "the VMM user (uid {uid}, gid {gid}) cannot {access} {path}; give it access \
         (and to the directories above) or choose another VMM user"
    )]
    UserCannotReach {
        uid: u32,
        gid: u32,
        path: PathBuf,
        access: &'static str,
    },
    #[error("cannot listen on {path} for the agent's announcement")]
    ReadySocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare the state directory {path} for the VMM")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl VmmError {
    /// What this error is about (see [`Reason`]): the host's VMM, so
    /// nothing a caller's request did.
    pub fn reason(&self) -> Reason {
        match self {
            VmmError::ProgramNotFound { .. }
            | VmmError::Spawn { .. }
            | VmmError::LogFile { .. }
            | VmmError::DeviceNotReady { .. }
            | VmmError::DeviceExited { .. }
            | VmmError::Exited
            | VmmError::Version { .. }
            | VmmError::Signal(_)
            | VmmError::Adopt(_)
            | VmmError::Wait(_)
            | VmmError::UserNeedsRoot { .. }
            | VmmError::UserCannotReach { .. }
            | VmmError::ReadySocket { .. }
            | VmmError::StateDir { .. } => Reason::Internal,
        }
    }
}
