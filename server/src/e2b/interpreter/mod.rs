//! The code interpreter as the host answers for it (port 49999):
//! `/execute` streamed as E2B's SDKs read it, and `/contexts`.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::reply::{self, Body};
use super::target::SandboxCall;

/// One request to a sandbox's code interpreter.
pub(crate) async fn handle(_call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    reply::error_json(
        StatusCode::NOT_IMPLEMENTED,
        &format!("{}: not served yet", request.uri().path()),
    )
}
