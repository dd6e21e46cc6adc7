//! The code interpreter's refusals: E2B's error shape (`reply::Failure`)
//! with the status E2B's code-interpreter SDKs read (404 their
//! `NotFoundException`, 502 their `TimeoutException`, anything else their
//! `SandboxException` with the body), from a service's `Status` in one
//! place ([`from_status`]).

use http::StatusCode;
use tonic::{Code, Status};

use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::e2b::reply::Failure;

/// The interpreter's answer to a failed service call.
pub fn from_status(status: &Status) -> Failure {
    let http = match reason::reason_of(status) {
        // No interpreter for the language in the image: the caller asked for
        // something this sandbox cannot do.
        Some(ErrorReason::GuestNotFound) => StatusCode::BAD_REQUEST,
        // An ended sandbox is gone for E2B.
        Some(ErrorReason::SandboxEnded) => StatusCode::NOT_FOUND,
        Some(ErrorReason::Unsupported) => StatusCode::NOT_IMPLEMENTED,
        Some(ErrorReason::SandboxPaused) => StatusCode::CONFLICT,
        _ => match status.code() {
            Code::InvalidArgument | Code::OutOfRange | Code::Cancelled => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            // E2B's SDKs read 502 as their timeout.
            Code::DeadlineExceeded => StatusCode::BAD_GATEWAY,
            Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        },
    };
    Failure::new(http, status.message())
}

/// Bad input: 400, naming the field.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, format!("{field}: {problem}"))
}

/// No such context: E2B's 404.
pub fn no_context(id: &str) -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        format!("context {id:?} not found (list them with GET /contexts)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_gets_the_status_the_sdks_read() {
        let missing = reason::status(ErrorReason::SandboxNotFound, "no sandbox x");
        assert_eq!(from_status(&missing).status, StatusCode::NOT_FOUND);
        let field = reason::invalid("code", "more than 4194304 bytes");
        let failure = from_status(&field);
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
        assert_eq!(failure.message, "code: more than 4194304 bytes");
        let no_r = reason::status(ErrorReason::GuestNotFound, "no interpreter for r");
        assert_eq!(from_status(&no_r).status, StatusCode::BAD_REQUEST);
        let slow = reason::status(ErrorReason::Timeout, "too slow");
        assert_eq!(from_status(&slow).status, StatusCode::BAD_GATEWAY);
        assert_eq!(
            from_status(&Status::internal("x")).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
