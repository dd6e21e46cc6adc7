//! The control plane: E2B's REST and JSON API (sandboxes, templates), each
//! call translated into `airlock.api.v1` calls of the caller's principal.
//!
//! - `body`: the bounded request body, read as JSON.
//! - `query`: the URL's query, and the SDKs' metadata filter.
//! - `wire`: E2B's JSON types.
//! - `shape`: a sandbox of the services as E2B's JSON has it.
//! - `create`: `POST /sandboxes` into a `CreateSandboxRequest`.
//! - `lifecycle`: get, kill, timeout, refresh, pause, resume, connect, fork.
//! - `list`: both lists, with their filters and pages.
//! - `logs`: a sandbox's logs, its network and ingress decisions.
//! - `metrics`: one sandbox's and several sandboxes' readings.
//! - `snapshots`: take, list and delete the caller's named snapshots (a
//!   create starts from one by `create`).
//! - `fail`: a service's `Status` as E2B's error (the one mapping).
//! - `time`: RFC 3339 times.

mod body;
mod create;
mod fail;
mod lifecycle;
mod list;
mod logs;
mod metrics;
mod query;
mod shape;
mod snapshots;
mod time;
mod wire;

#[cfg(feature = "fuzzing")]
pub use create::{translate, Version};
#[cfg(feature = "fuzzing")]
pub use wire::NewSandbox;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::reply::{self, Body, Failure};
use super::Front;
use crate::principal::Principal;

/// The envd version the control plane reports for every sandbox: at least
/// as new as each feature gate of the SDKs (the newest, 0.6.4, is the
/// watcher on network mounts), so they use every call the front serves.
pub const ENVD_VERSION: &str = "0.6.4";

/// What E2B's answers carry as `clientID`.
pub const CLIENT_ID: &str = "airlock";

/// One control-plane call: who makes it, on which front.
pub(crate) struct Ctl<'a> {
    pub front: &'a Front,
    pub principal: Principal,
}

impl Ctl<'_> {
    /// `message` as a request of the caller, for a service called in process.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        super::target::as_principal(&self.principal, message)
    }
}

/// One control-plane request of `principal`.
pub(crate) async fn handle(
    front: &Front,
    principal: Principal,
    request: Request<Incoming>,
) -> Response<Body> {
    let ctl = Ctl { front, principal };
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let query = parts.uri.query();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let method = &parts.method;
    let answered: Result<Response<Body>, Failure> = match (method, segments.as_slice()) {
        (&Method::POST, ["sandboxes"]) => create::create(&ctl, body, create::Version::V1).await,
        (&Method::POST, ["v2", "sandboxes"]) => {
            create::create(&ctl, body, create::Version::V2).await
        }
        (&Method::GET, ["sandboxes"]) => list::all(&ctl, query).await,
        (&Method::GET, ["v2", "sandboxes"]) => list::page(&ctl, query).await,
        (&Method::GET, ["sandboxes", "metrics"]) => metrics::several(&ctl, query).await,
        (&Method::GET, ["sandboxes", id]) => lifecycle::get(&ctl, id).await,
        (&Method::DELETE, ["sandboxes", id]) => lifecycle::kill(&ctl, id).await,
        (&Method::POST, ["sandboxes", id, "timeout"]) => {
            lifecycle::set_timeout(&ctl, id, body).await
        }
        (&Method::POST, ["sandboxes", id, "refreshes"]) => lifecycle::refresh(&ctl, id, body).await,
        (&Method::POST, ["sandboxes", id, "pause"]) => lifecycle::pause(&ctl, id, body).await,
        (&Method::POST, ["sandboxes", id, "resume"]) => lifecycle::resume(&ctl, id, body).await,
        (&Method::POST, ["sandboxes", id, "connect"] | ["v2", "sandboxes", id, "connect"]) => {
            lifecycle::connect(&ctl, id, body).await
        }
        (&Method::POST, ["sandboxes", id, "fork"]) => lifecycle::fork(&ctl, id, body).await,
        (&Method::GET, ["sandboxes", id, "metrics"]) => metrics::one(&ctl, id).await,
        (&Method::GET, ["sandboxes", id, "logs"]) => {
            logs::logs(&ctl, id, query, logs::Shape::V1).await
        }
        (&Method::GET, ["v2", "sandboxes", id, "logs"]) => {
            logs::logs(&ctl, id, query, logs::Shape::V2).await
        }
        (&Method::POST, ["sandboxes", id, "snapshots"]) => snapshots::take(&ctl, id, body).await,
        (&Method::GET, ["snapshots"]) => snapshots::list(&ctl, query).await,
        (&Method::DELETE, ["templates", id]) => snapshots::delete(&ctl, id).await,
        (&Method::PUT, ["sandboxes", id, "network"]) => {
            lifecycle::update_network(&ctl, id, body).await
        }
        (&Method::GET, ["templates"] | ["v2", "templates"]) => list::templates(&ctl).await,
        (_, ["sandboxes" | "templates" | "snapshots", ..] | ["v2" | "v3", ..]) => {
            Err(not_served(method, &path))
        }
        _ => Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("{method} {path}: no such call"),
        )),
    };
    match answered {
        Ok(response) => response,
        Err(failure) => {
            tracing::debug!(%method, path, status = %failure.status, message = failure.message, "e2b: refused");
            failure.response()
        }
    }
}

/// A call of E2B's API that Airlock does not serve (template builds,
/// volumes ...): 501, naming it.
fn not_served(method: &Method, path: &str) -> Failure {
    Failure::new(
        StatusCode::NOT_IMPLEMENTED,
        format!(
            "{method} {path}: not supported by Airlock's E2B front (docs/e2b.md lists what is)"
        ),
    )
}

/// An empty answer with `status` (E2B's 204s).
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(reply::full(bytes::Bytes::new()));
    *response.status_mut() = status;
    response
}
