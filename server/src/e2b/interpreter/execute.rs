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
use tokio::sync::mpsc;

use airlock_api::v1::{self as api, code_server::Code};

use super::contexts::{self, language};
use super::fail::{self, from_status};
use super::lines::Lines;
use super::{body, envs, shell, MAX_BODY_BYTES};
use crate::e2b::reply::{Body, BoxError, Failure};
use crate::e2b::target::SandboxCall;

/// Lines that may wait for a slow client.
const QUEUE: usize = 16;

/// The Code service's stream of a cell's events.
type Events = <crate::service::Services as Code>::RunCodeStream;

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
    let envs = body.env_vars.filter(|envs| !envs.is_empty());
    if envs.is_some() && language != "python" {
        return Err(fail::invalid(
            "env_vars",
            format!("per-run environment variables are set in Python cells only, not {language}: give them to the sandbox (envs at create) or export them in the cell"),
        ));
    }
    let context_id = context_id.unwrap_or_default();
    if let Some(envs) = &envs {
        envs::run_quietly(call, &context_id, envs::set_code(envs)).await?;
    }
    let code = match language.as_str() {
        "python" => shell::rewrite(&body.code).unwrap_or(body.code),
        _ => body.code,
    };
    let message = api::RunCodeRequest {
        sandbox_id: call.id.clone(),
        code,
        language,
        context_id: context_id.clone(),
        timeout_secs: None,
    };
    let started = call
        .services()
        .run_code(call.request(message))
        .await
        .map_err(|status| from_status(&status));
    let events = match (started, envs) {
        (Ok(events), None) => events.into_inner(),
        (Ok(events), Some(_)) => {
            return Ok(ndjson(restoring(call, context_id, events.into_inner())))
        }
        (Err(failure), envs) => {
            if envs.is_some() {
                restore(call, &context_id).await;
            }
            return Err(failure);
        }
    };
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
    Ok(ndjson(StreamBody::new(frames).boxed_unsync()))
}

/// The answer streaming `body`'s lines.
fn ndjson(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    *response.status_mut() = StatusCode::OK;
    response
}

/// Puts back what a cell's `env_vars` replaced, logging a failure.
async fn restore(call: &SandboxCall, context_id: &str) {
    if let Err(failure) = envs::run_quietly(call, context_id, envs::restore_code()).await {
        tracing::warn!(sandbox = %call.id, message = %failure.message, "e2b: env_vars not restored");
    }
}

/// `events` as lines, by a task that restores the cell's `env_vars` after
/// the cell ends or the client goes (which interrupts it).
fn restoring(call: &SandboxCall, context_id: String, mut events: Events) -> Body {
    let (lines_out, lines_in) = mpsc::channel::<Bytes>(QUEUE);
    let call = call.clone();
    call.front.state().clone().spawn(async move {
        let mut lines = Lines::default();
        'cell: loop {
            let next = tokio::select! {
                next = events.next() => next,
                () = lines_out.closed() => break,
            };
            let (out, last) = match next {
                None => break,
                Some(Ok(event)) => (lines.event(event), false),
                Some(Err(status)) => (lines.failed(status.message()), true),
            };
            for line in out {
                if lines_out.send(line).await.is_err() {
                    break 'cell;
                }
            }
            if last {
                break;
            }
        }
        // Dropping the stream interrupts a cell still running.
        drop(events);
        restore(&call, &context_id).await;
    });
    StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(lines_in)
            .map(|line| Ok::<_, BoxError>(Frame::data(line))),
    )
    .boxed_unsync()
}
