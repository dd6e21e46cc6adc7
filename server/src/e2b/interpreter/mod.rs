//! The code interpreter as the host answers for it (port 49999): E2B's
//! code-interpreter server, translated into the Code service
//! (`airlock.api.v1.Code`) of the sandbox's owner.
//!
//! ```text
//! POST   /execute                 {code, context_id, language, env_vars}
//!        ─> Code.RunCode ─> lines (`lines`, `results`): stdout, stderr,
//!           result, error, number_of_executions, end_of_execution
//! POST   /contexts                {language, cwd} ─> Code.CreateContext
//! GET    /contexts                ─> Code.ListContexts
//! POST   /contexts/{id}/restart   ─> Code.RestartContext
//! DELETE /contexts/{id}           ─> Code.RemoveContext
//! ```
//!
//! Python and bash (what the Code service runs); E2B's other languages are
//! refused naming the two. A Python cell's `!CMD` lines run in a shell
//! (`shell`). Failures are E2B's error shape with the status its SDKs
//! read (`fail`).

mod body;
mod contexts;
mod envs;
mod execute;
mod fail;
mod lines;
mod results;
mod shell;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::reply::{self, Body};
use super::target::SandboxCall;

/// The largest request body: a cell at the Code service's limit, with
/// room for JSON's escapes.
const MAX_BODY_BYTES: usize = 2 * airlock_api::limits::MAX_CODE_BYTES + 64 * 1024;

/// One request to a sandbox's code interpreter.
pub(crate) async fn handle(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let answer = match (&method, segments.as_slice()) {
        (&Method::POST, ["execute"]) => return execute::execute(call, request).await,
        (&Method::POST, ["contexts"]) => contexts::create(&call, request).await,
        (&Method::GET, ["contexts"]) => contexts::list(&call).await,
        (&Method::POST, ["contexts", id, "restart"]) => contexts::restart(&call, id).await,
        (&Method::DELETE, ["contexts", id]) => contexts::remove(&call, id).await,
        (&Method::GET, ["health"]) => Ok(reply::json(StatusCode::OK, &"OK")),
        (_, ["execute"] | ["contexts", ..]) => Err(reply::Failure::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} {path}: not a method of this call"),
        )),
        _ => Err(reply::Failure::new(
            StatusCode::NOT_FOUND,
            format!("{path}: no such code-interpreter call (/execute, /contexts)"),
        )),
    };
    answer.unwrap_or_else(|failure| failure.response())
}
