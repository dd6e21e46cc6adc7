//! `GET /files?path=&username=`: a file's bytes, streamed from our Files
//! service's `Read` as they come (never held whole), with its length when
//! it is a regular file. A missing file is 404 (the SDKs'
//! FileNotFoundException), a directory 400.

use futures::StreamExt;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tonic::Status;

use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, files_server::Files, FileType};

use super::query::Query;
use super::user;
use crate::e2b::reply::{Body, BoxError};
use crate::e2b::target::SandboxCall;

/// The answer to a download, or the status that refuses it.
pub async fn download(call: &SandboxCall, query: &Query) -> Result<Response<Body>, Status> {
    let user = user::resolve(call, query.username.as_deref()).await?;
    let raw = query
        .path
        .as_deref()
        .ok_or_else(|| invalid("path", "missing: name the file with ?path="))?;
    let path = user::absolute("path", raw, &user)?;
    let info = call
        .services()
        .stat(call.request(api::StatRequest {
            sandbox_id: call.id.clone(),
            path: path.clone(),
        }))
        .await?
        .into_inner();
    let kind = FileType::try_from(info.r#type).unwrap_or(FileType::Unspecified);
    let length = match kind {
        FileType::Directory => {
            return Err(invalid(
                "path",
                format!("{path} is a directory, not a file"),
            ))
        }
        FileType::File => Some(info.size),
        _ => None,
    };
    if length == Some(0) {
        return Ok(answer(Body::default(), Some(0)));
    }
    let mut chunks = call
        .services()
        .read(call.request(api::ReadFileRequest {
            sandbox_id: call.id.clone(),
            path,
            offset: 0,
            // A file that grows meanwhile is cut at the length announced.
            length: length.unwrap_or(0),
        }))
        .await?
        .into_inner();
    // The first chunk is awaited before answering, so a file the guest
    // cannot read is refused with its status rather than a cut body.
    let first = match chunks.next().await {
        Some(Ok(chunk)) => Some(chunk.data),
        Some(Err(status)) => return Err(status),
        None => None,
    };
    let rest = chunks.map(|chunk| {
        chunk
            .map(|chunk| Frame::data(chunk.data))
            .map_err(|status| -> BoxError { status.message().to_owned().into() })
    });
    let frames = futures::stream::iter(first.map(|data| Ok(Frame::data(data)))).chain(rest);
    Ok(answer(StreamBody::new(frames).boxed_unsync(), length))
}

fn answer(body: Body, length: Option<u64>) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}
