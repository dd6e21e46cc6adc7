//! The front's answers: its body type, JSON, and E2B's error shapes (the
//! control plane's `{"code": N, "message": "..."}`; envd's Connect errors
//! are the Connect codec's).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;

pub use crate::ingress::refuse::{full, Body, BoxError};

/// A refusal or failure of the control plane, answered in E2B's error
/// shape ([`error_json`]) by [`Failure::response`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// The answer.
    pub fn response(&self) -> Response<Body> {
        error_json(self.status, &self.message)
    }
}

/// A JSON answer with `status`.
pub fn json(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => with_type(status, Bytes::from(bytes), "application/json"),
        Err(error) => error_json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the answer could not be encoded: {error}"),
        ),
    }
}

/// E2B's error shape, `{"code": STATUS, "message": MESSAGE}`, with `status`.
pub fn error_json(status: StatusCode, message: &str) -> Response<Body> {
    #[derive(Serialize)]
    struct Error<'a> {
        code: u16,
        message: &'a str,
    }
    let body = serde_json::to_vec(&Error {
        code: status.as_u16(),
        message,
    })
    .unwrap_or_default();
    with_type(status, Bytes::from(body), "application/json")
}

/// A whole `body` of `content_type` with `status`.
pub fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_status() {
        let response = error_json(StatusCode::NOT_FOUND, "sandbox x not found");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
    }
}
