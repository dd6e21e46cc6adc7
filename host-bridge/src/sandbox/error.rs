//! The errors of a sandbox's configuration and start: [`ConfigError`]
//! (what a [`SandboxBuilder`](crate::SandboxBuilder) or a call was given
//! that cannot be used) and [`NamedTemplateError`] (why a start from a
//! named template failed).

use std::path::PathBuf;

use crate::accel::ParseAccelError;
use crate::error::Reason;

/// A cause that is another error of the library (a start's own failure),
/// boxed so that this file imports nothing that imports the crate's error.
type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// Something a sandbox was configured with, or a call asked for, that
/// cannot be used; the message says what to give instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Less memory than a guest boots in.
    #[error("memory {mib} MiB is too small; use at least 64")]
    MemoryTooSmall {
        /// What was asked for.
        mib: u32,
    },
    /// No vCPU, or more than QEMU's microvm takes.
    #[error("vcpus must be 1..=255, not {vcpus}")]
    Vcpus {
        /// What was asked for.
        vcpus: u32,
    },
    /// A root image, a workspace or serial ports on the process backend.
    #[error("the process backend has no disks or serial ports")]
    ProcessBackendDevices,
    /// The process backend's agent binary is not there.
    #[error("agent binary {path} not found; build it with `cargo build -p airlock-agent`")]
    AgentBinaryMissing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A lifetime ceiling of zero.
    #[error("a maximum lifetime of zero would kill the sandbox at once; use None for no ceiling")]
    ZeroLifetime,
    /// An unresponsive limit under a second.
    #[error(
        "an unresponsive limit under a second would kill busy guests; use None to turn the probe off"
    )]
    UnresponsiveTooShort,
    /// A console log budget too small for a tail.
    #[error(
        "a console log budget of {bytes} bytes is too small to keep a useful tail; use at least 64 KiB"
    )]
    ConsoleBudgetTooSmall {
        /// What was asked for.
        bytes: u64,
    },
    /// An idle timeout of zero.
    #[error("the idle timeout must be above zero")]
    ZeroIdleTimeout,
    /// A workspace without a root image to lay it over.
    #[error("a workspace needs a root image; set one with .image()")]
    WorkspaceWithoutImage,
    /// An adoptable sandbox on the vsock channel.
    #[error(
        "an adoptable sandbox needs the serial channel (the default); the vsock channel cannot \
         be adopted"
    )]
    AdoptableNeedsSerial,
    /// An adoption record for a QEMU sandbox without a saved machine.
    #[error("only a QEMU sandbox on the serial channel can be adoptable")]
    NotAdoptable,
    /// An environment variable that cannot be set.
    #[error("environment variable name {name:?} is empty or holds '=' or NUL")]
    EnvName {
        /// The name given.
        name: String,
    },
    /// An accelerator (the builder's, `AIRLOCK_ACCEL`, or a record's) that
    /// is not `auto`, `kvm` or `tcg`.
    #[error(transparent)]
    Accel(#[from] ParseAccelError),
    /// [`create_workspace`](crate::SandboxBuilder::create_workspace)
    /// without a workspace.
    #[error("no workspace to create; set one with .workspace()")]
    NoWorkspace,
    /// A saved or adopted sandbox's workspace file is no longer there.
    #[error("{sandbox}: its workspace {path} is gone")]
    WorkspaceGone {
        /// The sandbox, as a message names it (`saved sandbox ID`).
        sandbox: String,
        /// The workspace file.
        path: PathBuf,
    },
    /// CA certificates for the process backend, whose agent runs on the
    /// host.
    #[error("CA certificates are installed in a VM's guest; the process backend has none")]
    ProcessBackendCa,
    /// A network call on a sandbox started without a network.
    #[error("this sandbox has no network; start it with SandboxBuilder::network or allow_net")]
    NoNetwork,
    /// A guest vsock port on a backend without guest vsock ports.
    #[error("vsock port {port}: this backend has no guest vsock ports")]
    NoVsockPorts {
        /// The port asked for.
        port: u32,
    },
    /// Port 0 as a guest port.
    #[error("port 0 is not a guest port")]
    PortZero,
    /// An adoption record's network that cannot be made again.
    #[error("the adoption record's network: {what}")]
    RecordedNetwork {
        /// Which part of it (`rule "..."`, `an upstream root`, `a secret`).
        what: String,
        /// Why it cannot be used.
        #[source]
        source: BoxedError,
    },
}

impl ConfigError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            ConfigError::NoNetwork => Reason::NoNetwork,
            ConfigError::MemoryTooSmall { .. }
            | ConfigError::Vcpus { .. }
            | ConfigError::ProcessBackendDevices
            | ConfigError::AgentBinaryMissing { .. }
            | ConfigError::ZeroLifetime
            | ConfigError::UnresponsiveTooShort
            | ConfigError::ConsoleBudgetTooSmall { .. }
            | ConfigError::ZeroIdleTimeout
            | ConfigError::WorkspaceWithoutImage
            | ConfigError::AdoptableNeedsSerial
            | ConfigError::NotAdoptable
            | ConfigError::EnvName { .. }
            | ConfigError::Accel(_)
            | ConfigError::NoWorkspace
            | ConfigError::WorkspaceGone { .. }
            | ConfigError::ProcessBackendCa
            | ConfigError::NoVsockPorts { .. }
            | ConfigError::PortZero
            | ConfigError::RecordedNetwork { .. } => Reason::Invalid,
        }
    }

    /// An adoption record's network part `what` that cannot be used.
    pub(crate) fn recorded_network(what: impl Into<String>, source: impl Into<BoxedError>) -> Self {
        ConfigError::RecordedNetwork {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Why a start from a named template failed; such a start never boots
/// cold instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NamedTemplateError {
    /// This configuration cannot start from a template at all (templates
    /// are off, the process backend, the vsock channel, a workspace).
    #[error("cannot start from it: {why}")]
    Refused {
        /// Why not.
        why: &'static str,
    },
    /// The template cannot serve this start as it is: made for another
    /// size, or by another kernel, agent or QEMU. Rebuild it.
    #[error(transparent)]
    Unusable(BoxedError),
    /// Starting from it failed.
    #[error(transparent)]
    Start(BoxedError),
}

impl NamedTemplateError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            NamedTemplateError::Refused { .. } | NamedTemplateError::Unusable(_) => {
                Reason::Unsupported
            }
            NamedTemplateError::Start(_) => Reason::Internal,
        }
    }
}
