//! The one mapping from a service's `Status` to the control plane's answer:
//! E2B's error shape with the HTTP status E2B's SDKs read (404 their
//! not-found, 401 their authentication error, 429 their rate limit, 409 a
//! conflict, 400 bad input naming the field).

use http::StatusCode;
use tonic::{Code, Status};

use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::e2b::reply::Failure;

/// The control plane's answer to a failed service call.
pub fn from_status(status: &Status) -> Failure {
    let http = match reason::reason_of(status) {
        // An ended sandbox is gone for E2B.
        Some(ErrorReason::SandboxEnded) => StatusCode::NOT_FOUND,
        Some(ErrorReason::Unsupported) => StatusCode::NOT_IMPLEMENTED,
        Some(ErrorReason::SandboxPaused) => StatusCode::CONFLICT,
        _ => by_code(status.code()),
    };
    let message = match reason::field_of(status) {
        Some(field) => {
            let problem = status
                .message()
                .strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(status.message());
            format!("{}: {problem}", e2b_field(field))
        }
        None => status.message().to_owned(),
    };
    Failure::new(http, message)
}

/// E2B's name for a field of an `airlock.api.v1` request the control
/// plane fills, so that a refusal names what the caller sent.
fn e2b_field(field: &str) -> String {
    let (head, rest) = field.split_at(field.find(['.', '[']).unwrap_or(field.len()));
    let name = match head {
        "timeout_secs" => "timeout",
        "envs" => "envVars",
        "allow_net" => "network.allowOut",
        "image" | "template" => "templateID",
        "page_size" => "limit",
        "page_token" => "nextToken",
        "idle" => "timeout (autoPause)",
        other => other,
    };
    format!("{name}{rest}")
}

/// The HTTP status of a gRPC code.
fn by_code(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Cancelled => StatusCode::BAD_REQUEST,
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// What the control plane does not offer: 501, naming it.
pub fn unsupported(what: &str, why: &str) -> Failure {
    Failure::new(
        StatusCode::NOT_IMPLEMENTED,
        format!("{what}: not supported by Airlock ({why})"),
    )
}

/// Bad input: 400, naming the field.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, format!("{field}: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_gets_the_status_e2b_names_it_with() {
        let missing = reason::status(ErrorReason::SandboxNotFound, "no sandbox x");
        assert_eq!(from_status(&missing).status, StatusCode::NOT_FOUND);
        let field = reason::invalid("timeout_secs", "at most 2592000");
        let failure = from_status(&field);
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
        assert!(
            failure.message.starts_with("timeout: "),
            "{}",
            failure.message
        );
        let full = reason::status(ErrorReason::QuotaExceeded, "10 sandboxes");
        assert_eq!(from_status(&full).status, StatusCode::TOO_MANY_REQUESTS);
        let ended = reason::status(ErrorReason::SandboxEnded, "ended");
        assert_eq!(from_status(&ended).status, StatusCode::NOT_FOUND);
        let env = from_status(&reason::invalid("envs", "at most 256"));
        assert_eq!(env.message, "envVars: at most 256");
        let rule = from_status(&reason::invalid("allow_net[2]", "bad rule"));
        assert_eq!(rule.message, "network.allowOut[2]: bad rule");
        let gone = reason::status(ErrorReason::Unsupported, "no vsock save");
        assert_eq!(from_status(&gone).status, StatusCode::NOT_IMPLEMENTED);
    }
}
