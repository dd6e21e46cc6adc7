//! The library's errors as statuses: the one mapping, used by every call.
//! The reason comes from the error's variant where that says more than
//! its kind (an ended sandbox, an interrupted call), else from its
//! [`ErrorKind`]; the message is the error with its causes, as the CLI
//! prints it.

use tonic::Status;

use airlock::{error_chain, Error, ErrorKind};
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

/// The status for `error`.
pub fn error_status(error: &Error) -> Status {
    reason::status(error_reason(error), error_chain(error))
}

/// The reason for `error`.
pub fn error_reason(error: &Error) -> ErrorReason {
    use ErrorReason as R;
    match error {
        Error::NoSuchSandbox { .. } => R::SandboxNotFound,
        Error::Saved(airlock::saved::SavedError::NotSaved { .. }) => R::SandboxNotFound,
        Error::TooManySandboxes { .. } => R::SandboxLimit,
        Error::SandboxEnded { .. } | Error::VmGone { .. } => R::SandboxEnded,
        Error::Paused | Error::ResumeForCall { .. } => R::SandboxPaused,
        Error::SavedDuringCall { .. } | Error::ForkedDuringCall { .. } => R::Interrupted,
        Error::AgentTooOld { .. }
        | Error::CannotSave { .. }
        | Error::NamedTemplate { unusable: true, .. } => R::Unsupported,
        Error::Workspace(airlock::WorkspaceError::Busy(_)) => R::Unsupported,
        _ => match error.kind() {
            ErrorKind::NotFound => R::GuestNotFound,
            ErrorKind::Invalid => R::InvalidArgument,
            ErrorKind::AlreadyExists => R::AlreadyExists,
            ErrorKind::Exhausted => R::GuestExhausted,
            ErrorKind::Precondition => R::GuestRefused,
            ErrorKind::Unavailable => R::Interrupted,
            ErrorKind::Timeout => R::Timeout,
            _ => R::Internal,
        },
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
                Error::Config("bad".into()),
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
                    reason: "its snapshot was made by another kernel; rebuild it".into(),
                    unusable: true,
                },
                Code::FailedPrecondition,
                ErrorReason::Unsupported,
            ),
            (
                Error::NamedTemplate {
                    name: "web".into(),
                    reason: "QEMU exited".into(),
                    unusable: false,
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
        ];
        for (error, code, reason) in cases {
            let status = error_status(&error);
            assert_eq!(status.code(), code, "{error}");
            assert_eq!(reason::reason_of(&status), Some(reason), "{error}");
            assert!(status.message().contains(&error.to_string()), "{status:?}");
        }
    }
}
