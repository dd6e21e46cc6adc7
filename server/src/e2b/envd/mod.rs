//! envd, E2B's in-sandbox daemon, as the host answers for it (port 49983):
//! the `process.Process` and `filesystem.Filesystem` services over the
//! Connect protocol, the `/files` upload and download, and `/health`.

pub(crate) mod files;
mod filesystem;
mod process;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::reply::{self, Body};
use super::target::SandboxCall;

/// One request to a sandbox's envd.
pub(crate) async fn handle(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    if path.starts_with("/process.Process/") {
        process::handle(call, request).await
    } else if path.starts_with("/filesystem.Filesystem/") {
        filesystem::handle(call, request).await
    } else if path == "/files" {
        files::handle(call, request).await
    } else if path == "/health" {
        let mut response = Response::new(reply::full(bytes::Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        response
    } else {
        reply::error_json(StatusCode::NOT_FOUND, &format!("{path}: no such envd call"))
    }
}
