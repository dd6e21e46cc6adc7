//! The Connect protocol's error codes: their names on the wire and the
//! HTTP status a unary error goes out with.

use http::StatusCode;

/// A Connect error code (the gRPC codes, named in snake case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// The code's name in an error's JSON (`"not_found"`).
    pub fn name(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code, as the protocol
    /// specifies it.
    pub fn http_status(self) -> StatusCode {
        match self {
            // 499 "client closed request": not a named constant.
            Code::Canceled => StatusCode::from_u16(499).unwrap_or(StatusCode::REQUEST_TIMEOUT),
            Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }

    /// The Connect code of a gRPC code (`Ok` has none: `Unknown`).
    pub fn from_grpc(code: tonic::Code) -> Code {
        use tonic::Code as G;
        match code {
            G::Cancelled => Code::Canceled,
            G::InvalidArgument => Code::InvalidArgument,
            G::DeadlineExceeded => Code::DeadlineExceeded,
            G::NotFound => Code::NotFound,
            G::AlreadyExists => Code::AlreadyExists,
            G::PermissionDenied => Code::PermissionDenied,
            G::ResourceExhausted => Code::ResourceExhausted,
            G::FailedPrecondition => Code::FailedPrecondition,
            G::Aborted => Code::Aborted,
            G::OutOfRange => Code::OutOfRange,
            G::Unimplemented => Code::Unimplemented,
            G::Internal => Code::Internal,
            G::Unavailable => Code::Unavailable,
            G::DataLoss => Code::DataLoss,
            G::Unauthenticated => Code::Unauthenticated,
            G::Ok | G::Unknown => Code::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_the_protocols_names_and_statuses() {
        assert_eq!(Code::NotFound.name(), "not_found");
        assert_eq!(Code::NotFound.http_status(), StatusCode::NOT_FOUND);
        assert_eq!(Code::Canceled.http_status().as_u16(), 499);
        assert_eq!(
            Code::ResourceExhausted.http_status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(Code::Unavailable.http_status().as_u16(), 503);
        assert_eq!(Code::from_grpc(tonic::Code::Cancelled), Code::Canceled);
        assert_eq!(
            Code::from_grpc(tonic::Code::DeadlineExceeded),
            Code::DeadlineExceeded
        );
    }
}
