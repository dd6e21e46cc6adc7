//! [`ConnectError`]: a failed Connect call, with its code and message, and
//! the two shapes it goes out in: a unary call's JSON body with the code's
//! HTTP status, or a stream's end-of-stream message.
//!
//! A `tonic::Status` of our services becomes a `ConnectError` in one place
//! ([`ConnectError::from_status`]).

use bytes::Bytes;
use http::{header, HeaderValue, Response};
use serde::Serialize;

use super::code::Code;
use crate::e2b::reply::{full, Body};

/// A failed Connect call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.name())]
pub struct ConnectError {
    pub code: Code,
    pub message: String,
}

#[derive(Serialize)]
struct Wire<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    /// `unimplemented`.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(Code::Unimplemented, message)
    }

    /// `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// The error of a failed call of our services: the same code, the same
    /// message.
    pub fn from_status(status: &tonic::Status) -> Self {
        Self::new(Code::from_grpc(status.code()), status.message())
    }

    /// The error as JSON, `{"code": "not_found", "message": "..."}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(Wire {
            code: self.code.name(),
            message: &self.message,
        })
        .unwrap_or_default()
    }

    /// The answer of a unary call that failed: the JSON body with the
    /// code's HTTP status.
    pub fn unary_response(&self) -> Response<Body> {
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut response = Response::new(full(Bytes::from(body)));
        *response.status_mut() = self.code.http_status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

impl From<tonic::Status> for ConnectError {
    fn from(status: tonic::Status) -> Self {
        Self::from_status(&status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unary_error_has_its_status_and_shape() {
        let error = ConnectError::not_found("process 7 not found");
        let response = error.unary_response();
        assert_eq!(response.status(), http::StatusCode::NOT_FOUND);
        assert_eq!(
            error.to_json(),
            serde_json::json!({"code": "not_found", "message": "process 7 not found"})
        );
    }

    #[test]
    fn a_status_keeps_its_code_and_message() {
        let status = airlock_api::reason::status(
            airlock_api::v1::ErrorReason::SandboxNotFound,
            "no sandbox x",
        );
        let error = ConnectError::from(status);
        assert_eq!(error.code, Code::NotFound);
        assert_eq!(error.message, "no sandbox x");
    }
}
