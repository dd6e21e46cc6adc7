//! The agent's error at its public face, and the ONE place errors become
//! gRPC statuses.
//!
//! Each module has its own error enum ([`CmdlineError`], [`ReaperError`],
//! [`ServerError`], [`ProcessError`], [`FilesError`], [`SystemError`],
//! [`CodeError`]), in the module's `error.rs` when the module imports
//! others (a leaf such as `clock` keeps it beside its code); [`AgentError`]
//! gathers them. Errors import downward only: this file imports those
//! error types and nothing else of the crate, and no module imports it.
//! `From<AgentError> for Status` picks the code a client can act on, and the
//! message is the `Display` chain (error, then each source, as
//! [`airlock_report::chain`] prints it), never `Debug`.

use tonic::{Code, Status};

use airlock_report::chain;

use crate::clock::ClockError;
use crate::cmdline::CmdlineError;
use crate::init::root::RootError;
use crate::personalize::error::PersonalizeError;
use crate::reaper::error::ReaperError;
use crate::server::error::ServerError;
use crate::services::code::error::CodeError;
use crate::services::files::error::FilesError;
use crate::services::process::error::ProcessError;
use crate::services::system::error::SystemError;
use crate::trust::error::TrustError;

/// Anything that can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The kernel command line asks for something impossible.
    #[error(transparent)]
    Cmdline(#[from] CmdlineError),
    /// The root image could not be mounted and switched to.
    #[error(transparent)]
    Root(#[from] RootError),
    /// The child reaper could not start.
    #[error(transparent)]
    Reaper(#[from] ReaperError),
    /// The gRPC server could not listen or serve.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A program could not be started or followed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A file operation failed.
    #[error(transparent)]
    Files(#[from] FilesError),
    /// A `System` call failed.
    #[error(transparent)]
    System(#[from] SystemError),
    /// A context or a cell failed.
    #[error(transparent)]
    Code(#[from] CodeError),
    /// The tokio runtime could not be built.
    #[error("cannot build the async runtime")]
    Runtime(#[source] std::io::Error),
}

impl From<AgentError> for Status {
    fn from(e: AgentError) -> Self {
        Status::new(code(&e), chain(&e))
    }
}

impl From<ProcessError> for Status {
    fn from(e: ProcessError) -> Self {
        AgentError::from(e).into()
    }
}

impl From<FilesError> for Status {
    fn from(e: FilesError) -> Self {
        AgentError::from(e).into()
    }
}

impl From<SystemError> for Status {
    fn from(e: SystemError) -> Self {
        AgentError::from(e).into()
    }
}

impl From<CodeError> for Status {
    fn from(e: CodeError) -> Self {
        AgentError::from(e).into()
    }
}

/// The gRPC code for an error: what the client should do about it.
fn code(e: &AgentError) -> Code {
    match e {
        AgentError::Files(f) => f.code(),
        AgentError::Process(p) => process_code(p),
        // An interpreter that cannot start says why as a program would.
        AgentError::Code(CodeError::Start(p)) => process_code(p),
        AgentError::Code(c) => c.code(),
        AgentError::System(s) => system_code(s),
        AgentError::Cmdline(_) => Code::InvalidArgument,
        AgentError::Root(_)
        | AgentError::Reaper(_)
        | AgentError::Server(_)
        | AgentError::Runtime(_) => Code::Internal,
    }
}

/// The gRPC code for a process error.
fn process_code(p: &ProcessError) -> Code {
    use ProcessError as P;
    match p {
        P::EmptyArgv
        | P::Nul { .. }
        | P::BadEnvName(_)
        | P::RelativeCwd(_)
        | P::CwdNotDirectory(_)
        | P::CwdUnusable { .. }
        | P::ArgsTooLong
        | P::BadUser(_)
        | P::BadTag(_)
        | P::NoSelector
        | P::BadSignal(_)
        | P::BadWindowSize { .. } => Code::InvalidArgument,
        P::ProgramNotFound(_)
        | P::InterpreterMissing(_)
        | P::CwdNotFound(_)
        | P::UserNotFound(_)
        | P::GroupNotFound(_)
        | P::NoSuchProcess(_) => Code::NotFound,
        P::ProgramNoAccess(_) | P::CwdNoAccess(_) | P::UserSwitchDenied(_) => {
            Code::PermissionDenied
        }
        P::NotExecutable(_)
        | P::StdinNotPiped(_)
        | P::StdinClosed(_)
        | P::StdinGone(_)
        | P::Exited(_)
        | P::LimitsUnavailable
        | P::NotATerminal(_)
        | P::InputIsTerminal(_) => Code::FailedPrecondition,
        P::TagInUse(_) => Code::AlreadyExists,
        P::Displaced(_) => Code::Aborted,
        P::Exhausted { .. } => Code::ResourceExhausted,
        P::Pty { source, .. } if exhausted(source) => Code::ResourceExhausted,
        P::Spawn { .. }
        | P::DevNull(_)
        | P::Pipe { .. }
        | P::Lost { .. }
        | P::StdinWrite { .. }
        | P::Signal { .. }
        | P::Limits(_)
        | P::Pty { .. }
        | P::Resize { .. } => Code::Internal,
    }
}

fn system_code(e: &SystemError) -> Code {
    use PersonalizeError as P;
    use TrustError as T;
    let clock = |c: &ClockError| match c {
        ClockError::OutOfRange(_) => Code::InvalidArgument,
        ClockError::Read(_) | ClockError::Set(_) => Code::Internal,
    };
    match e {
        SystemError::NotPid1(_) => Code::FailedPrecondition,
        SystemError::Clock(c) | SystemError::Personalize(P::Clock(c)) => clock(c),
        SystemError::Personalize(p) => match p {
            P::EntropySize(_) | P::BadHostname(_) | P::SandboxIdTooLong(_) => Code::InvalidArgument,
            P::Clock(c) => clock(c),
            P::Entropy(_) | P::Hostname { .. } => Code::Internal,
        },
        SystemError::Trust(t) => match t {
            T::Empty | T::TooMany { .. } | T::NotACertificate { .. } | T::TooLarge { .. } => {
                Code::InvalidArgument
            }
            T::Dir { .. } | T::Mount { .. } | T::Store(_) => Code::Internal,
        },
    }
}

/// Whether an errno says the guest ran out of something (ptys, fds,
/// memory) rather than that something is broken.
fn exhausted(e: &std::io::Error) -> bool {
    use nix::libc;
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::ENOSPC | libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_precise() {
        let cases = [
            (ProcessError::EmptyArgv, Code::InvalidArgument),
            (ProcessError::ProgramNotFound("x".into()), Code::NotFound),
            (ProcessError::CwdNotFound("/nope".into()), Code::NotFound),
            (
                ProcessError::ProgramNoAccess("x".into()),
                Code::PermissionDenied,
            ),
            (
                ProcessError::NotExecutable("x".into()),
                Code::FailedPrecondition,
            ),
            (
                ProcessError::Exhausted {
                    program: "x".into(),
                    source: std::io::Error::from_raw_os_error(nix::libc::EMFILE),
                },
                Code::ResourceExhausted,
            ),
            (ProcessError::UserNotFound("bob".into()), Code::NotFound),
            (ProcessError::NoSuchProcess("pid 7".into()), Code::NotFound),
            (ProcessError::BadUser("a:b:c".into()), Code::InvalidArgument),
            (ProcessError::BadSignal(99), Code::InvalidArgument),
            (ProcessError::TagInUse("t".into()), Code::AlreadyExists),
            (ProcessError::Exited(7), Code::FailedPrecondition),
            (ProcessError::StdinNotPiped(7), Code::FailedPrecondition),
            (ProcessError::Displaced(7), Code::Aborted),
            (ProcessError::NotATerminal(7), Code::FailedPrecondition),
            (ProcessError::InputIsTerminal(7), Code::FailedPrecondition),
            (
                ProcessError::BadWindowSize {
                    rows: 70_000,
                    cols: 1,
                },
                Code::InvalidArgument,
            ),
            (
                ProcessError::Pty {
                    program: "sh".into(),
                    source: std::io::Error::from_raw_os_error(nix::libc::EAGAIN),
                },
                Code::ResourceExhausted,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(Status::from(err).code(), want);
        }
    }

    #[test]
    fn system_codes_are_precise() {
        let cases = [
            (SystemError::NotPid1("acts"), Code::FailedPrecondition),
            (
                SystemError::Clock(ClockError::OutOfRange(0)),
                Code::InvalidArgument,
            ),
            (
                SystemError::Clock(ClockError::Set(nix::errno::Errno::EPERM)),
                Code::Internal,
            ),
            (
                PersonalizeError::EntropySize(3).into(),
                Code::InvalidArgument,
            ),
            (
                PersonalizeError::BadHostname(String::new()).into(),
                Code::InvalidArgument,
            ),
            (
                PersonalizeError::SandboxIdTooLong(200).into(),
                Code::InvalidArgument,
            ),
            (
                PersonalizeError::Clock(ClockError::OutOfRange(0)).into(),
                Code::InvalidArgument,
            ),
            (
                PersonalizeError::Hostname {
                    hostname: "h".into(),
                    source: nix::errno::Errno::EPERM,
                }
                .into(),
                Code::Internal,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(Status::from(err).code(), want);
        }
    }

    #[test]
    fn message_is_display_with_sources_not_debug() {
        let status = Status::from(ProcessError::Spawn {
            program: "tool".into(),
            source: std::io::Error::other("boom"),
        });
        assert_eq!(status.message(), "cannot start tool: boom");
        assert!(!status.message().contains("Spawn"));
    }

    #[test]
    fn not_found_message_names_the_program() {
        let status = Status::from(ProcessError::ProgramNotFound("frobnicate".into()));
        assert_eq!(status.message(), "program not found: frobnicate");
    }
}
