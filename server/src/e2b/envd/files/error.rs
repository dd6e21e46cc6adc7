//! The one mapping of our services' statuses to `/files` answers: E2B's
//! `{"code": N, "message": "..."}` with the HTTP status its SDKs turn into
//! the right exception (404 FileNotFoundException, 400
//! InvalidArgumentException, 401, 429, 502 sandbox not running, 507 not
//! enough space).

use http::StatusCode;
use tonic::{Code, Status};

use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::e2b::reply::Failure;

/// The `/files` failure for `status`.
pub fn failure(status: &Status) -> Failure {
    Failure::new(http_status(status), status.message())
}

/// The HTTP status E2B's envd answers for what `status` says.
pub fn http_status(status: &Status) -> StatusCode {
    use ErrorReason as R;
    match reason::reason_of(status) {
        Some(R::SandboxNotFound | R::SandboxEnded) => return StatusCode::BAD_GATEWAY,
        Some(R::GuestExhausted) => return StatusCode::INSUFFICIENT_STORAGE,
        Some(R::GuestRefused) => return StatusCode::BAD_REQUEST,
        _ => {}
    }
    match status.code() {
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::AlreadyExists => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::BAD_GATEWAY,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_404_and_a_refusal_400() {
        let missing = reason::status(ErrorReason::GuestNotFound, "no such file");
        assert_eq!(http_status(&missing), StatusCode::NOT_FOUND);
        let refused = reason::status(ErrorReason::GuestRefused, "is a directory");
        assert_eq!(http_status(&refused), StatusCode::BAD_REQUEST);
        let gone = reason::status(ErrorReason::SandboxEnded, "ended");
        assert_eq!(http_status(&gone), StatusCode::BAD_GATEWAY);
        assert_eq!(
            http_status(&reason::invalid("path", "missing")),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(failure(&Status::internal("x")).message, "x");
    }
}
