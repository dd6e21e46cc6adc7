//! The public error type of the host library.
//!
//! Each module has its own precise error; this enum is what crosses the
//! crate's public face. Messages say what to do where a user can act.

use std::path::PathBuf;
use std::time::Duration;

use crate::fs::FsError;
use crate::vmm::VmmError;
use crate::workspace::WorkspaceError;

/// Everything that can go wrong while starting, using or stopping a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given something unusable.
    #[error("invalid sandbox configuration: {0}")]
    Config(String),

    /// A file the sandbox needs (kernel, initramfs, root image) is missing.
    #[error("{what} not found at {path}; build it with `scripts/setup` (see README)")]
    MissingArtifact { what: &'static str, path: PathBuf },

    /// The private state directory could not be created.
    #[error("cannot create a state directory under {base}")]
    StateDir {
        base: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The workspace could not be created, opened or locked.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),

    /// Starting or talking to the VMM or its vsock helper failed.
    #[error(transparent)]
    Vmm(#[from] VmmError),

    /// The VM exited before the agent answered.
    #[error("the VM exited during boot ({status}); console tail:\n{console_tail}")]
    VmExited {
        status: String,
        console_tail: String,
    },

    /// The VM exited while a call was open: a program powered off or
    /// rebooted the guest (possible only with `Command::privileged`), or the
    /// guest kernel died.
    #[error(
        "{call}: the VM exited ({status}) while the call was open; a privileged program may \
         have rebooted or powered off the guest, or the guest kernel died (see the console)"
    )]
    VmGone { call: &'static str, status: String },

    /// The agent did not answer within the boot timeout.
    #[error(
        "the agent did not answer within {timeout:?} ({last_error}); console tail:\n{console_tail}"
    )]
    BootTimeout {
        timeout: Duration,
        last_error: String,
        console_tail: String,
    },

    /// The agent refused or failed a call.
    #[error("{call}: {} ({:?})", status.message(), status.code())]
    Agent {
        call: &'static str,
        status: Box<tonic::Status>,
    },

    /// A file transfer failed on the host side.
    #[error(transparent)]
    Fs(#[from] FsError),

    /// The agent's connection failed.
    #[error("agent connection failed")]
    Transport(#[source] tonic::transport::Error),

    /// The guest agent predates a feature the call needs.
    #[error(
        "{feature} needs agent protocol revision {needed}, but the guest agent speaks {found}; \
         rebuild the initramfs with scripts/setup"
    )]
    AgentTooOld {
        feature: &'static str,
        needed: u32,
        found: u32,
    },

    /// The agent sent something the protocol does not allow.
    #[error("protocol violation: {0}")]
    Protocol(String),
}

impl Error {
    pub(crate) fn agent(call: &'static str, status: tonic::Status) -> Self {
        Error::Agent {
            call,
            status: Box::new(status),
        }
    }

    /// The gRPC code when the agent refused a call (for example `NotFound`
    /// for a program that does not exist).
    pub fn agent_code(&self) -> Option<tonic::Code> {
        match self {
            Error::Agent { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats an error with its causes, `outer: inner: innermost`, for a
/// one-line report.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
