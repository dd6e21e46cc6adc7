//! The library's errors as statuses: the one mapping, used by every call.
//! The library classifies each error once ([`Error::reason`], whose
//! [`Reason::kind`] is its [`ErrorKind`]); here each reason is named by
//! the API's [`ErrorReason`] (which carries its gRPC code,
//! [`reason::code`]), in one table, and a reason this server does not know
//! yet by its kind. The message is the error with its causes, as the CLI
//! prints it.

use tonic::Status;

use airlock::{error_chain, Error, ErrorKind, Reason};
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

/// The status for `error`.
pub fn error_status(error: &Error) -> Status {
    reason::status(error_reason(error), error_chain(error))
}

/// The reason for `error`.
pub fn error_reason(error: &Error) -> ErrorReason {
    api_reason(error.reason())
}

/// The API's name for the library's `reason`.
fn api_reason(reason: Reason) -> ErrorReason {
    use ErrorReason as R;
    match reason {
        Reason::SandboxNotFound => R::SandboxNotFound,
        Reason::NotFound => R::NotFound,
        Reason::GuestNotFound => R::GuestNotFound,
        Reason::Invalid => R::InvalidArgument,
        Reason::AlreadyExists => R::AlreadyExists,
        Reason::SandboxLimit => R::SandboxLimit,
        Reason::GuestExhausted => R::GuestExhausted,
        Reason::SandboxEnded => R::SandboxEnded,
        Reason::SandboxPaused => R::SandboxPaused,
        Reason::NoNetwork => R::NoNetwork,
        Reason::Unsupported => R::Unsupported,
        Reason::GuestRefused => R::GuestRefused,
        Reason::PortClosed => R::PortClosed,
        Reason::Interrupted => R::Interrupted,
        Reason::Timeout => R::Timeout,
        Reason::Internal => R::Internal,
        other => kind_reason(other.kind()),
    }
}

/// The reason for an error of `kind` whose [`Reason`] this server does not
/// know yet (the library added one): the general reason of its code.
fn kind_reason(kind: ErrorKind) -> ErrorReason {
    use ErrorReason as R;
    match kind {
        ErrorKind::NotFound => R::NotFound,
        ErrorKind::Invalid => R::InvalidArgument,
        ErrorKind::AlreadyExists => R::AlreadyExists,
        ErrorKind::Exhausted => R::GuestExhausted,
        ErrorKind::Precondition => R::Unsupported,
        ErrorKind::Unavailable => R::Interrupted,
        ErrorKind::Timeout => R::Timeout,
        _ => R::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn agent(code: Code, message: &str) -> Error {
        // The library's own constructor is private; an agent refusal as
        // the library reports it.
        Error::Agent {
            call: "Process.Start",
            status: Box::new(Status::new(code, message)),
        }
    }

    #[test]
    fn each_kind_reaches_the_client_with_its_code_and_reason() {
        let cases = [
            (
                agent(Code::NotFound, "program not found: nope"),
                Code::NotFound,
                ErrorReason::GuestNotFound,
            ),
            (
                Error::NoSuchSandbox { id: "x".into() },
                Code::NotFound,
                ErrorReason::SandboxNotFound,
            ),
            (
                agent(Code::InvalidArgument, "cwd must be absolute"),
                Code::InvalidArgument,
                ErrorReason::InvalidArgument,
            ),
            (
                Error::Config(airlock::ConfigError::ZeroIdleTimeout),
                Code::InvalidArgument,
                ErrorReason::InvalidArgument,
            ),
            (
                agent(Code::AlreadyExists, "context exists"),
                Code::AlreadyExists,
                ErrorReason::AlreadyExists,
            ),
            (
                Error::TooManySandboxes { max: 1 },
                Code::ResourceExhausted,
                ErrorReason::SandboxLimit,
            ),
            (
                agent(Code::ResourceExhausted, "out of pids"),
                Code::ResourceExhausted,
                ErrorReason::GuestExhausted,
            ),
            (
                Error::Paused,
                Code::FailedPrecondition,
                ErrorReason::SandboxPaused,
            ),
            (
                Error::NamedTemplate {
                    name: "web".into(),
                    problem: airlock::NamedTemplateError::Unusable(
                        "its snapshot was made by another kernel; rebuild it".into(),
                    ),
                },
                Code::FailedPrecondition,
                ErrorReason::Unsupported,
            ),
            (
                Error::NamedTemplate {
                    name: "web".into(),
                    problem: airlock::NamedTemplateError::Start("QEMU exited".into()),
                },
                Code::Internal,
                ErrorReason::Internal,
            ),
            (
                agent(Code::PermissionDenied, "permission denied: /root/x"),
                Code::FailedPrecondition,
                ErrorReason::GuestRefused,
            ),
            (
                Error::SavedDuringCall { call: "x" },
                Code::Unavailable,
                ErrorReason::Interrupted,
            ),
            (
                agent(Code::DeadlineExceeded, "slow"),
                Code::DeadlineExceeded,
                ErrorReason::Timeout,
            ),
            (
                Error::Protocol("odd".into()),
                Code::Internal,
                ErrorReason::Internal,
            ),
            (
                Error::Config(airlock::ConfigError::NoNetwork),
                Code::FailedPrecondition,
                ErrorReason::NoNetwork,
            ),
            (
                Error::Workspace(airlock::WorkspaceError::Busy("/ws".into())),
                Code::FailedPrecondition,
                ErrorReason::Unsupported,
            ),
            (
                Error::Workspace(airlock::WorkspaceError::Missing("/ws".into())),
                Code::NotFound,
                ErrorReason::NotFound,
            ),
            (
                Error::Saved(airlock::saved::SavedError::NotSaved { id: "x".into() }),
                Code::NotFound,
                ErrorReason::SandboxNotFound,
            ),
            (
                Error::PortRefused {
                    port: 8080,
                    reason: "nothing listens on port 8080".into(),
                },
                Code::FailedPrecondition,
                ErrorReason::PortClosed,
            ),
        ];
        for (error, code, reason) in cases {
            let status = error_status(&error);
            assert_eq!(status.code(), code, "{error}");
            assert_eq!(reason::reason_of(&status), Some(reason), "{error}");
            assert!(status.message().contains(&error.to_string()), "{status:?}");
        }
    }

    #[test]
    fn every_reason_keeps_the_code_of_its_kind() {
        // The library's kind of an error and the code the client sees
        // never disagree: each reason's code is its kind's.
        let reasons = [
            Reason::SandboxNotFound,
            Reason::NotFound,
            Reason::GuestNotFound,
            Reason::Invalid,
            Reason::AlreadyExists,
            Reason::SandboxLimit,
            Reason::GuestExhausted,
            Reason::SandboxEnded,
            Reason::SandboxPaused,
            Reason::NoNetwork,
            Reason::Unsupported,
            Reason::GuestRefused,
            Reason::PortClosed,
            Reason::Interrupted,
            Reason::Timeout,
            Reason::Internal,
        ];
        for library in reasons {
            let named = api_reason(library);
            assert_eq!(
                reason::code(named),
                reason::code(kind_reason(library.kind())),
                "{library:?} is {named:?}"
            );
        }
    }
}
