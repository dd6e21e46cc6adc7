//! `/contexts`: E2B's code contexts as the Code service's contexts.
//!
//! E2B's context is `{"id", "language", "cwd"}`. The Code service's context
//! does not carry its working directory, so the front remembers the one a
//! context was created with ([`Cwds`], by sandbox and context); a context it
//! did not create (a language's default one, one made over gRPC) reports
//! E2B's default, the user's home, which is where the E2B template's
//! contexts start (its `WORKDIR`).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};

use airlock_api::v1::{self as api, code_server::Code};

use super::body;
use super::fail::{self, from_status};
use super::MAX_BODY_BYTES;
use crate::e2b::reply::{self, Body, Failure};
use crate::e2b::target::SandboxCall;

/// E2B's default working directory of a context.
pub const DEFAULT_CWD: &str = "/home/user";

/// The working directories of the contexts the front created, by
/// `(sandbox, context)`. Entries go with their context's removal; a sandbox
/// that ends leaves a few short strings behind until the server stops.
static CWDS: LazyLock<Mutex<HashMap<(String, String), String>>> = LazyLock::new(Default::default);

fn remember(sandbox: &str, context: &str, cwd: &str) {
    if let Ok(mut cwds) = CWDS.lock() {
        cwds.insert((sandbox.to_owned(), context.to_owned()), cwd.to_owned());
    }
}

fn forget(sandbox: &str, context: &str) {
    if let Ok(mut cwds) = CWDS.lock() {
        cwds.remove(&(sandbox.to_owned(), context.to_owned()));
    }
}

fn cwd_of(sandbox: &str, context: &str) -> String {
    CWDS.lock()
        .ok()
        .and_then(|cwds| cwds.get(&(sandbox.to_owned(), context.to_owned())).cloned())
        .unwrap_or_else(|| DEFAULT_CWD.to_owned())
}

/// The Code service's language for E2B's `language` (absent: Python).
pub fn language(field: &str, language: Option<&str>) -> Result<&'static str, Failure> {
    match language.map(str::trim) {
        None | Some("") | Some("python") | Some("python3") => Ok("python"),
        Some("bash") | Some("sh") => Ok("bash"),
        Some(other) => Err(fail::invalid(
            field,
            format!(
                "{other:?} is not served here: this sandbox's interpreter runs python and bash"
            ),
        )),
    }
}

/// E2B's context.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ContextJson {
    pub id: String,
    pub language: String,
    pub cwd: String,
}

fn json(sandbox: &str, context: &api::CodeContext) -> ContextJson {
    ContextJson {
        id: context.context_id.clone(),
        language: context.language.clone(),
        cwd: cwd_of(sandbox, &context.context_id),
    }
}

/// The body of `POST /contexts`.
#[derive(Debug, Deserialize)]
struct CreateBody {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

/// `POST /contexts`.
pub async fn create(
    call: &SandboxCall,
    request: Request<Incoming>,
) -> Result<Response<Body>, Failure> {
    let body: CreateBody = body::json(request, MAX_BODY_BYTES).await?;
    let language = language("language", body.language.as_deref())?;
    let cwd = body.cwd.filter(|cwd| !cwd.is_empty());
    let message = api::CreateContextRequest {
        sandbox_id: call.id.clone(),
        language: language.to_owned(),
        cwd: cwd.clone().unwrap_or_default(),
        ..Default::default()
    };
    let context = call
        .services()
        .create_context(call.request(message))
        .await
        .map_err(|status| from_status(&status))?
        .into_inner();
    if let Some(cwd) = &cwd {
        remember(&call.id, &context.context_id, cwd);
    }
    tracing::debug!(sandbox = %call.id, context = %context.context_id, language, "e2b: context created");
    Ok(reply::json(StatusCode::OK, &json(&call.id, &context)))
}

/// The sandbox's contexts as the Code service lists them.
pub async fn all(call: &SandboxCall) -> Result<Vec<api::CodeContext>, Failure> {
    let message = api::ListContextsRequest {
        sandbox_id: call.id.clone(),
    };
    Ok(call
        .services()
        .list_contexts(call.request(message))
        .await
        .map_err(|status| from_status(&status))?
        .into_inner()
        .contexts)
}

/// `GET /contexts`.
pub async fn list(call: &SandboxCall) -> Result<Response<Body>, Failure> {
    let contexts: Vec<ContextJson> = all(call)
        .await?
        .iter()
        .map(|context| json(&call.id, context))
        .collect();
    Ok(reply::json(StatusCode::OK, &contexts))
}

/// `POST /contexts/{id}/restart`.
pub async fn restart(call: &SandboxCall, id: &str) -> Result<Response<Body>, Failure> {
    let message = api::ContextRequest {
        sandbox_id: call.id.clone(),
        context_id: id.to_owned(),
    };
    let context = call
        .services()
        .restart_context(call.request(message))
        .await
        .map_err(|status| not_found_as_context(&status, id))?
        .into_inner();
    Ok(reply::json(StatusCode::OK, &json(&call.id, &context)))
}

/// `DELETE /contexts/{id}`.
pub async fn remove(call: &SandboxCall, id: &str) -> Result<Response<Body>, Failure> {
    let message = api::ContextRequest {
        sandbox_id: call.id.clone(),
        context_id: id.to_owned(),
    };
    call.services()
        .remove_context(call.request(message))
        .await
        .map_err(|status| not_found_as_context(&status, id))?;
    forget(&call.id, id);
    let mut response = Response::new(reply::full(bytes::Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// A missing context is named as one, E2B's 404 (the sandbox itself was
/// found: the request reached it).
fn not_found_as_context(status: &tonic::Status, id: &str) -> Failure {
    // The guest's own not-found (GUEST_NOT_FOUND) is the context's here;
    // a missing sandbox (SANDBOX_NOT_FOUND) keeps its own message.
    match airlock_api::reason::reason_of(status) {
        Some(api::ErrorReason::NotFound | api::ErrorReason::GuestNotFound) => fail::no_context(id),
        _ => from_status(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_and_bash_are_served_and_the_rest_named() {
        assert_eq!(language("language", None).ok(), Some("python"));
        assert_eq!(language("language", Some("bash")).ok(), Some("bash"));
        let refused = language("language", Some("r")).expect_err("r is refused");
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(
            refused.message.starts_with("language: \"r\""),
            "{}",
            refused.message
        );
        assert!(refused.message.contains("python and bash"));
    }

    #[test]
    fn a_context_reports_the_cwd_it_was_made_with() {
        let context = api::CodeContext {
            context_id: "c1".into(),
            language: "python".into(),
            ..Default::default()
        };
        assert_eq!(json("sbx-test-cwd", &context).cwd, DEFAULT_CWD);
        remember("sbx-test-cwd", "c1", "/tmp");
        assert_eq!(json("sbx-test-cwd", &context).cwd, "/tmp");
        forget("sbx-test-cwd", "c1");
        assert_eq!(json("sbx-test-cwd", &context).cwd, DEFAULT_CWD);
    }
}
