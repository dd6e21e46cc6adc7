//! How a failed call is told: a gRPC status whose code says what kind of
//! failure it is, whose message is for people, and whose metadata names the
//! [`ErrorReason`] (`airlock-error`) and, for a bad request, the field at
//! fault (`airlock-field`), for programs.
//!
//! Each reason has one code ([`code`]); a server builds statuses only with
//! [`status`] or [`invalid`], so the two never disagree, and a client reads
//! them back with [`reason_of`] and [`field_of`].

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::v1::ErrorReason;

/// The metadata entry that names the reason (e.g. `SANDBOX_NOT_FOUND`).
pub const REASON_KEY: &str = "airlock-error";
/// The metadata entry that names the field of a bad request (e.g.
/// `metadata`, `limits.memory_bytes`).
pub const FIELD_KEY: &str = "airlock-field";

/// The gRPC code that goes with `reason`.
pub fn code(reason: ErrorReason) -> Code {
    use ErrorReason as R;
    match reason {
        R::Unauthenticated => Code::Unauthenticated,
        R::OwnerOnly => Code::PermissionDenied,
        R::InvalidArgument => Code::InvalidArgument,
        R::SandboxNotFound | R::NotFound | R::GuestNotFound => Code::NotFound,
        R::AlreadyExists => Code::AlreadyExists,
        R::SandboxLimit | R::QuotaExceeded | R::RateLimited | R::GuestExhausted => {
            Code::ResourceExhausted
        }
        R::SandboxEnded
        | R::SandboxPaused
        | R::NoNetwork
        | R::Unsupported
        | R::GuestRefused
        | R::PortClosed => Code::FailedPrecondition,
        R::Interrupted | R::ShuttingDown => Code::Unavailable,
        R::Timeout => Code::DeadlineExceeded,
        R::Internal | R::Unspecified => Code::Internal,
    }
}

/// A status for `reason`, with its code and `message`.
pub fn status(reason: ErrorReason, message: impl Into<String>) -> Status {
    let mut status = Status::new(code(reason), message);
    status
        .metadata_mut()
        .insert(REASON_KEY, MetadataValue::from_static(reason.as_str_name()));
    status
}

/// `INVALID_ARGUMENT` for `field`: the message is `"{field}: {problem}"`.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Status {
    let mut status = status(ErrorReason::InvalidArgument, format!("{field}: {problem}"));
    if let Ok(value) = MetadataValue::try_from(field) {
        status.metadata_mut().insert(FIELD_KEY, value);
    }
    status
}

/// The reason a status names, if it names one this crate knows.
pub fn reason_of(status: &Status) -> Option<ErrorReason> {
    let name = status.metadata().get(REASON_KEY)?.to_str().ok()?;
    ErrorReason::from_str_name(name)
}

/// The field a bad request's status names, if any.
pub fn field_of(status: &Status) -> Option<&str> {
    status.metadata().get(FIELD_KEY)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_carries_its_reason_and_the_field() {
        let status = invalid("metadata", "at most 64 labels");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "metadata: at most 64 labels");
        assert_eq!(reason_of(&status), Some(ErrorReason::InvalidArgument));
        assert_eq!(field_of(&status), Some("metadata"));

        let status = super::status(ErrorReason::SandboxNotFound, "no sandbox x");
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(reason_of(&status), Some(ErrorReason::SandboxNotFound));
        assert_eq!(field_of(&status), None);
        assert_eq!(reason_of(&Status::internal("x")), None);
    }

    #[test]
    fn every_reason_has_a_code_that_is_not_ok() {
        for value in 0..64 {
            if let Ok(reason) = ErrorReason::try_from(value) {
                assert_ne!(code(reason), Code::Ok, "{reason:?}");
            }
        }
    }
}
