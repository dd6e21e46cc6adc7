//! envd's `process` service over the Connect protocol.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::e2b::reply::{self, Body};
use crate::e2b::target::SandboxCall;

/// One call of the service.
pub(crate) async fn handle(_call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    reply::error_json(
        StatusCode::NOT_IMPLEMENTED,
        &format!("{}: not served yet", request.uri().path()),
    )
}
