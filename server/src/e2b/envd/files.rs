//! envd's `/files`: a file's download (GET) and the upload of one or more
//! files (POST, multipart or a raw body).

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::e2b::reply::{self, Body};
use crate::e2b::target::SandboxCall;

/// One `/files` request.
pub(crate) async fn handle(_call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    reply::error_json(
        StatusCode::NOT_IMPLEMENTED,
        &format!("{} /files: not served yet", request.method()),
    )
}
