//! envd's `/files`: a file's download (GET) and the upload of one or more
//! files (POST, multipart or a raw body), translated into our Files
//! service's `Stat`, `Read` and `Write`.

mod download;
mod error;
mod gunzip;
mod query;
pub(crate) mod signature;
mod upload;
pub(crate) mod user;
pub(crate) mod write;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::e2b::reply::{self, Body};
use crate::e2b::target::SandboxCall;

use query::Query;

/// One `/files` request.
pub(crate) async fn handle(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    let query = match Query::parse(request.uri()) {
        Ok(query) => query,
        Err(status) => return error::failure(&status).response(),
    };
    let method = request.method().clone();
    let answer = match method {
        Method::GET => download::download(&call, &query).await,
        Method::POST => upload::upload(&call, &query, request).await,
        _ => {
            return reply::error_json(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} /files: GET downloads a file, POST uploads files"),
            )
        }
    };
    answer.unwrap_or_else(|status| {
        tracing::debug!(sandbox = %call.id, %method, message = status.message(), "e2b: /files refused");
        error::failure(&status).response()
    })
}
