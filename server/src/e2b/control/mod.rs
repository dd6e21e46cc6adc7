//! The control plane: E2B's REST and JSON API (sandboxes, templates), each
//! call translated into `airlock.api.v1` calls of the caller's principal.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::reply::{self, Body};
use super::Front;
use crate::principal::Principal;

/// One control-plane request of `principal`.
pub(crate) async fn handle(
    _front: &Front,
    _principal: Principal,
    request: Request<Incoming>,
) -> Response<Body> {
    reply::error_json(
        StatusCode::NOT_FOUND,
        &format!(
            "{} {}: no such call",
            request.method(),
            request.uri().path()
        ),
    )
}
