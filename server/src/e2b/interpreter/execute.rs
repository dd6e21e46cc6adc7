//! `POST /execute`: a cell, run by the Code service in the context or the
//! language's default context, its events streamed back as E2B's lines
//! (`lines`) while they happen.
//!
//! E2B's SDKs bound a cell's time themselves (they close the request); a
//! closed request drops the service's stream, which interrupts the cell,
//! as a closed connection does to E2B's own server.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde::Deserialize;

use airlock_api::v1::{self as api, code_server::Code};

use super::contexts::{self, language};
use super::fail::{self, from_status};
use super::lines::Lines;
use super::{body, shell, MAX_BODY_BYTES};
use crate::e2b::reply::{Body, BoxError, Failure};
use crate::e2b::target::SandboxCall;

/// The body of `POST /execute`.
#[derive(Debug, Deserialize)]
struct ExecuteBody {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
}

/// `POST /execute`.
pub async fn execute(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    match start(&call, request).await {
        Ok(response) => response,
        Err(failure) => failure.response(),
    }
}

async fn start(call: &SandboxCall, request: Request<Incoming>) -> Result<Response<Body>, Failure> {
    let body: ExecuteBody = body::json(request, MAX_BODY_BYTES).await?;
    let context_id = body.context_id.filter(|id| !id.is_empty());
    if context_id.is_some() && body.language.as_deref().is_some_and(|l| !l.is_empty()) {
        return Err(fail::invalid(
            "language",
            "give a context_id or a language, not both",
        ));
    }
    if body.env_vars.as_ref().is_some_and(|envs| !envs.is_empty()) {
        return Err(fail::invalid(
            "env_vars",
            "per-run environment variables are not supported here: give them to the sandbox \
             (envs at create) or set os.environ in the cell",
        ));
    }
    let language = match &context_id {
        // The context's own language: a context named that does not exist
        // is E2B's 404 (the Code service would make it).
        Some(id) => contexts::all(call)
            .await?
            .into_iter()
            .find(|context| &context.context_id == id)
            .map(|context| context.language)
            .ok_or_else(|| fail::no_context(id))?,
        None => language("language", body.language.as_deref())?.to_owned(),
    };
    let code = match language.as_str() {
        "python" => shell::rewrite(&body.code).unwrap_or(body.code),
        _ => body.code,
    };
    let message = api::RunCodeRequest {
        sandbox_id: call.id.clone(),
        code,
        language,
        context_id: context_id.unwrap_or_default(),
        timeout_secs: None,
    };
    let events = call
        .services()
        .run_code(call.request(message))
        .await
        .map_err(|status| from_status(&status))?
        .into_inner();
    let mut lines = Lines::default();
    let frames = events
        .scan(false, move |ended, event| {
            if *ended {
                return futures::future::ready(None);
            }
            let out = match event {
                Ok(event) => lines.event(event),
                Err(status) => {
                    *ended = true;
                    tracing::debug!(%status, "e2b: a cell's stream failed");
                    lines.failed(status.message())
                }
            };
            futures::future::ready(Some(out))
        })
        .flat_map(futures::stream::iter)
        .map(|line: Bytes| Ok::<_, BoxError>(Frame::data(line)));
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    *response.status_mut() = StatusCode::OK;
    Ok(response)
}
