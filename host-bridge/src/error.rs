//! The public error type of the host library.
//!
//! Each module has its own precise error; this enum is what crosses the
//! crate's public face. Messages say what to do where a user can act.

use std::path::PathBuf;
use std::time::Duration;

use crate::fs::FsError;
use crate::lifecycle::vm::Unavailable;
use crate::lifecycle::EndReason;
use crate::manager::PoolError;
use crate::trust::TrustError;
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

    /// The CA certificates the guest was to trust cannot be used.
    #[error(transparent)]
    Trust(Box<TrustError>),

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

    /// The sandbox ended while a call was open: see the reason (a program
    /// powered off the guest, the lifetime ceiling, a kill...).
    #[error("{call}: the sandbox ended while the call was open: {reason}")]
    VmGone {
        call: &'static str,
        reason: EndReason,
    },

    /// The sandbox had already ended when the call was made.
    #[error("the sandbox has ended: {reason}")]
    SandboxEnded { reason: EndReason },

    /// The sandbox is paused and its policy is
    /// [`PausedCalls::Fail`](crate::PausedCalls::Fail).
    #[error("the sandbox is paused; resume it first")]
    Paused,

    /// The sandbox was saved to disk ([`Sandbox::pause_to_disk`](crate::Sandbox::pause_to_disk))
    /// while this call was open, which ended its VM process and the call's
    /// connection; the next call restores the sandbox. (Output streams of
    /// programs re-attach by themselves.)
    #[error(
        "{call}: the sandbox was saved to disk while the call was open; the next call restores it"
    )]
    SavedDuringCall { call: &'static str },

    /// The sandbox was [forked](crate::Sandbox::fork) while this call was
    /// open: the fork's snapshot ended the call's connection, so that the
    /// snapshot holds no half-sent message. The sandbox runs on, and the
    /// call can be made again. (Output streams of programs re-attach by
    /// themselves.)
    #[error(
        "{call}: the sandbox was forked while the call was open; it runs on, and the call can \
         be made again"
    )]
    ForkedDuringCall { call: &'static str },

    /// The sandbox was paused or saved to disk, and starting it again for
    /// this call failed; the sandbox stays as it was, and a later call
    /// tries again.
    #[error("{call}: resuming the sandbox for the call failed: {detail}")]
    ResumeForCall { call: &'static str, detail: String },

    /// A [`Sandboxes`](crate::Sandboxes) manager is at its maximum.
    #[error("{max} sandboxes are running, the most this manager allows")]
    TooManySandboxes { max: usize },

    /// A [`Sandboxes`](crate::Sandboxes) manager's pool was misused.
    #[error(transparent)]
    Pool(#[from] PoolError),

    /// No sandbox by this id in the manager.
    #[error("no sandbox {id}")]
    NoSuchSandbox { id: String },

    /// The agent did not answer within the boot timeout.
    #[error(
        "the agent did not answer within {timeout:?} ({last_error}); console tail:\n{console_tail}"
    )]
    BootTimeout {
        timeout: Duration,
        last_error: String,
        console_tail: String,
    },

    /// The agent announced that it serves, but the host could not reach it
    /// over the VM's vsock device.
    #[error(
        "the guest agent announced it was serving {waited:?} ago, but the host cannot reach it \
         ({last_error}); vsock device: {device}; console tail:\n{console_tail}"
    )]
    AgentUnreachable {
        waited: Duration,
        last_error: String,
        device: String,
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
        feature: airlock_proto::Feature,
        needed: u32,
        found: u32,
    },

    /// A sandbox cannot be saved to disk or forked as it is configured.
    #[error("cannot save this sandbox: {reason}")]
    CannotSave { reason: String },

    /// Saving a VM to disk, or starting it again from a snapshot, failed.
    #[error("{what}: {detail}")]
    Snapshot { what: &'static str, detail: String },

    /// A saved sandbox's files: missing, unreadable or refused.
    #[error(transparent)]
    Saved(#[from] crate::saved::SavedError),

    /// The agent sent something the protocol does not allow.
    #[error("protocol violation: {0}")]
    Protocol(String),

    /// Nothing listens on the guest port a connection was for (or the
    /// guest refused it otherwise); the reason names the port.
    #[error("{reason}")]
    PortRefused { port: u16, reason: String },

    /// The sandbox's network could not be set up on the host.
    #[error("setting up the sandbox's network")]
    Network(#[from] airlock_gateway::GatewayError),

    /// A start from a named template failed; it never boots cold instead.
    /// `unusable`: the template cannot serve this start as it is (made for
    /// another size, or by another kernel or agent: rebuild it), rather
    /// than a start that failed.
    #[error("template {name}: {reason}")]
    NamedTemplate {
        name: String,
        reason: String,
        unusable: bool,
    },

    /// A sandbox could not be adopted or detached (see [`crate::adopt`]).
    #[error(transparent)]
    Adopt(#[from] crate::adopt::AdoptError),

    /// A network rule would open the host itself to the guest, and the
    /// sandbox's host access is denied (see [`airlock_gateway::host`]);
    /// `index` is the rule's place in the policy.
    #[error("{error}")]
    HostRule {
        index: usize,
        error: airlock_gateway::host::HostRuleError,
    },
}

impl From<TrustError> for Error {
    fn from(error: TrustError) -> Self {
        Error::Trust(Box::new(error))
    }
}

/// What kind of failure an [`Error`] is, for a front (an RPC server, a CLI)
/// that must tell its caller in its own terms: [`Error::kind`] classifies
/// every error once, so fronts map kinds, not variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Something named does not exist: a sandbox, a saved sandbox, a guest
    /// file, a program, an interpreter.
    NotFound,
    /// The caller asked for something malformed or out of bounds.
    Invalid,
    /// It exists already (a code context by that id).
    AlreadyExists,
    /// A limit was reached: the manager's maximum, the guest's resources.
    Exhausted,
    /// The sandbox is not in a state for this: ended, paused, without
    /// network, configured so that it cannot (a workspace cannot be saved),
    /// an agent too old, a workspace held elsewhere, a guest refusal.
    Precondition,
    /// Try again: the call was cut by a save or a fork, or the connection
    /// to the agent failed.
    Unavailable,
    /// The guest did not answer in time.
    Timeout,
    /// Anything else: the VMM, a boot, the host's files, a protocol
    /// violation.
    Internal,
}

impl Error {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::Config(_) | Error::Trust(_) | Error::HostRule { .. } => K::Invalid,
            Error::NoSuchSandbox { .. } => K::NotFound,
            Error::TooManySandboxes { .. } => K::Exhausted,
            Error::VmGone { .. }
            | Error::SandboxEnded { .. }
            | Error::Paused
            | Error::ResumeForCall { .. }
            | Error::AgentTooOld { .. }
            | Error::CannotSave { .. }
            | Error::PortRefused { .. }
            | Error::NamedTemplate { unusable: true, .. } => K::Precondition,
            Error::SavedDuringCall { .. } | Error::ForkedDuringCall { .. } => K::Unavailable,
            Error::Transport(_) => K::Unavailable,
            Error::BootTimeout { .. } => K::Timeout,
            Error::Workspace(WorkspaceError::Busy(_)) => K::Precondition,
            Error::Workspace(WorkspaceError::Missing(_)) => K::NotFound,
            Error::Workspace(WorkspaceError::TooSmall(_) | WorkspaceError::NotExt4(_)) => {
                K::Invalid
            }
            Error::Pool(PoolError::TooLarge { .. }) => K::Invalid,
            Error::Pool(PoolError::NoPool) => K::Precondition,
            Error::Saved(crate::saved::SavedError::NotSaved { .. }) => K::NotFound,
            Error::Fs(FsError::EscapingEntry { .. } | FsError::NonUtf8Path(_)) => K::Invalid,
            Error::Fs(FsError::NotADirectory(_)) => K::Precondition,
            Error::Adopt(adopt) => adopt.kind(),
            Error::Agent { status, .. } => match status.code() {
                tonic::Code::NotFound => K::NotFound,
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => K::Invalid,
                tonic::Code::AlreadyExists => K::AlreadyExists,
                tonic::Code::ResourceExhausted => K::Exhausted,
                tonic::Code::FailedPrecondition
                | tonic::Code::PermissionDenied
                | tonic::Code::Unimplemented => K::Precondition,
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Aborted => {
                    K::Unavailable
                }
                tonic::Code::DeadlineExceeded => K::Timeout,
                _ => K::Internal,
            },
            _ => K::Internal,
        }
    }

    pub(crate) fn agent(call: &'static str, status: tonic::Status) -> Self {
        let held_back = std::error::Error::source(&status)
            .and_then(|source| source.downcast_ref::<Unavailable>())
            .cloned();
        match held_back {
            Some(Unavailable::Ended(reason)) => return Error::SandboxEnded { reason },
            Some(Unavailable::Paused) => return Error::Paused,
            Some(Unavailable::SavedDuringCall) => return Error::SavedDuringCall { call },
            Some(Unavailable::ForkedDuringCall) => return Error::ForkedDuringCall { call },
            Some(Unavailable::ResumeFailed(detail)) => {
                return Error::ResumeForCall { call, detail }
            }
            None => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(code: tonic::Code) -> Error {
        Error::agent("Process.Start", tonic::Status::new(code, "refused"))
    }

    #[test]
    fn every_kind_has_its_errors() {
        let cases = [
            (agent(tonic::Code::NotFound), ErrorKind::NotFound),
            (Error::NoSuchSandbox { id: "x".into() }, ErrorKind::NotFound),
            (Error::Config("bad".into()), ErrorKind::Invalid),
            (agent(tonic::Code::InvalidArgument), ErrorKind::Invalid),
            (agent(tonic::Code::AlreadyExists), ErrorKind::AlreadyExists),
            (Error::TooManySandboxes { max: 2 }, ErrorKind::Exhausted),
            (Error::Paused, ErrorKind::Precondition),
            (
                Error::SandboxEnded {
                    reason: EndReason::Stopped,
                },
                ErrorKind::Precondition,
            ),
            (
                Error::Workspace(WorkspaceError::Busy("/ws".into())),
                ErrorKind::Precondition,
            ),
            (
                agent(tonic::Code::PermissionDenied),
                ErrorKind::Precondition,
            ),
            (Error::SavedDuringCall { call: "x" }, ErrorKind::Unavailable),
            (agent(tonic::Code::DeadlineExceeded), ErrorKind::Timeout),
            (Error::Protocol("odd".into()), ErrorKind::Internal),
            (agent(tonic::Code::Internal), ErrorKind::Internal),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
        }
    }
}
