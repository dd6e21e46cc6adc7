//! The public error type of the host library.
//!
//! Each module has its own precise error, in its own `error.rs` (which
//! imports only files that import nothing of the crate, and other
//! `error.rs` files); this enum wraps them and is what crosses the crate's
//! public face, so it imports those files and never the modules
//! themselves, and every module may return it. Messages say what to do
//! where a user can act; [`error_chain`] prints an error with its causes.
//!
//! - `kind`: [`Reason`] and [`ErrorKind`], how each error is classified
//!   for a front ([`Error::reason`], [`Error::kind`]); every variant is
//!   classified where it is declared, by an exhaustive `match`.

use std::path::PathBuf;
use std::time::Duration;

mod kind;

pub use kind::{ErrorKind, Reason};

use crate::adopt::AdoptError;
use crate::fs::FsError;
use crate::lifecycle::{EndReason, Unavailable};
use crate::manager::PoolError;
use crate::manager::WarmUpError;
use crate::sandbox::ConfigError;
use crate::sandbox::NamedTemplateError;
use crate::saved::SavedError;
use crate::snapshot::SnapshotStoreError;
use crate::trust::TrustError;
use crate::vmm::VmmError;
use crate::workspace::WorkspaceError;

/// Everything that can go wrong while starting, using or stopping a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given something unusable, or a call asked for
    /// what this sandbox's configuration lacks.
    #[error("invalid sandbox configuration: {0}")]
    Config(#[from] ConfigError),

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

    /// Saving a VM to disk, or starting it again from a snapshot, failed:
    /// QEMU's migration, the snapshot's files, or the restored agent.
    #[error("{what}: {source}")]
    Snapshot {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A saved sandbox's files: missing, unreadable or refused.
    #[error(transparent)]
    Saved(#[from] SavedError),

    /// The snapshot store: a snapshot missing, unreadable, or its files.
    #[error(transparent)]
    SnapshotStore(#[from] SnapshotStoreError),

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
    #[error("template {name}: {problem}")]
    NamedTemplate {
        name: String,
        #[source]
        problem: NamedTemplateError,
    },

    /// A sandbox could not be adopted or detached (see [`crate::adopt`]).
    #[error(transparent)]
    Adopt(#[from] AdoptError),

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

impl From<WarmUpError> for Error {
    fn from(error: WarmUpError) -> Self {
        Error::Pool(PoolError::WarmUp(error))
    }
}

impl Error {
    /// What this error is about (see [`Reason`]): every variant is
    /// classified here, or by its module's error where it is declared.
    pub fn reason(&self) -> Reason {
        use Reason as R;
        match self {
            Error::Config(error) => error.reason(),
            Error::NamedTemplate { problem, .. } => problem.reason(),
            Error::HostRule { .. } => R::Invalid,
            Error::Trust(error) => error.reason(),
            Error::Workspace(error) => error.reason(),
            Error::Vmm(error) => error.reason(),
            Error::Pool(error) => error.reason(),
            Error::Fs(error) => error.reason(),
            Error::Saved(error) => error.reason(),
            Error::SnapshotStore(error) => error.reason(),
            Error::Adopt(error) => error.reason(),
            Error::Agent { status, .. } => agent_reason(status.code()),
            Error::NoSuchSandbox { .. } => R::SandboxNotFound,
            Error::TooManySandboxes { .. } => R::SandboxLimit,
            Error::VmGone { .. } | Error::SandboxEnded { .. } => R::SandboxEnded,
            Error::Paused | Error::ResumeForCall { .. } => R::SandboxPaused,
            Error::AgentTooOld { .. } | Error::CannotSave { .. } => R::Unsupported,
            Error::PortRefused { .. } => R::PortClosed,
            Error::SavedDuringCall { .. }
            | Error::ForkedDuringCall { .. }
            | Error::Transport(_) => R::Interrupted,
            Error::BootTimeout { .. } => R::Timeout,
            Error::MissingArtifact { .. }
            | Error::StateDir { .. }
            | Error::VmExited { .. }
            | Error::AgentUnreachable { .. }
            | Error::Snapshot { .. }
            | Error::Protocol(_)
            | Error::Network(_) => R::Internal,
        }
    }

    /// What kind of failure this is (see [`ErrorKind`]): the kind of its
    /// [`reason`](Error::reason).
    pub fn kind(&self) -> ErrorKind {
        self.reason().kind()
    }

    /// Saving or restoring a VM (`what`) failed because of `source`.
    pub(crate) fn snapshot(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Snapshot {
            what,
            source: source.into(),
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

/// What the agent's refusal of a call is about, by its status code.
fn agent_reason(code: tonic::Code) -> Reason {
    use tonic::Code as C;
    use Reason as R;
    match code {
        C::NotFound => R::GuestNotFound,
        C::InvalidArgument | C::OutOfRange => R::Invalid,
        C::AlreadyExists => R::AlreadyExists,
        C::ResourceExhausted => R::GuestExhausted,
        C::FailedPrecondition | C::PermissionDenied => R::GuestRefused,
        C::Unimplemented => R::Unsupported,
        C::Unavailable | C::Cancelled | C::Aborted => R::Interrupted,
        C::DeadlineExceeded => R::Timeout,
        C::Ok | C::Unknown | C::Internal | C::DataLoss | C::Unauthenticated => R::Internal,
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Formats an error with its causes, `outer: inner: innermost`, for a
/// one-line report: the workspace's one formatter (a cause whose text the
/// line already holds is left out).
pub use airlock_report::chain as error_chain;

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
            (
                Error::Config(ConfigError::ZeroIdleTimeout),
                ErrorKind::Invalid,
            ),
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

    #[test]
    fn reasons_tell_apart_what_kinds_share() {
        let cases = [
            (
                Error::NoSuchSandbox { id: "x".into() },
                Reason::SandboxNotFound,
            ),
            (agent(tonic::Code::NotFound), Reason::GuestNotFound),
            (
                Error::Workspace(WorkspaceError::Missing("/ws".into())),
                Reason::NotFound,
            ),
            (Error::TooManySandboxes { max: 2 }, Reason::SandboxLimit),
            (
                agent(tonic::Code::ResourceExhausted),
                Reason::GuestExhausted,
            ),
            (
                Error::Workspace(WorkspaceError::Busy("/ws".into())),
                Reason::Unsupported,
            ),
            (agent(tonic::Code::PermissionDenied), Reason::GuestRefused),
            (Error::Paused, Reason::SandboxPaused),
            (
                Error::PortRefused {
                    port: 80,
                    reason: "nothing listens on port 80".into(),
                },
                Reason::PortClosed,
            ),
            (Error::Pool(PoolError::NoPool), Reason::Unsupported),
        ];
        for (error, reason) in cases {
            assert_eq!(error.reason(), reason, "{error}");
            assert_eq!(error.kind(), reason.kind(), "{error}");
        }
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let error = Error::Workspace(WorkspaceError::Io {
            action: "open",
            path: "/ws".into(),
            source: std::io::Error::other("permission denied"),
        });
        assert_eq!(
            error_chain(&error),
            "cannot open workspace /ws: permission denied"
        );
        // A warm-up's cause, the library's own error, boxed.
        let error = Error::from(WarmUpError::Exec {
            command: "sh".into(),
            source: Box::new(Error::Paused),
        });
        assert_eq!(
            error_chain(&error),
            "warm-up `sh`: the sandbox is paused; resume it first"
        );
    }
}
