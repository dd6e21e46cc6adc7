//! A request's JSON body, bounded: E2B's error shape for one too large
//! (413), unreadable, or not the JSON the call takes (400, naming what is
//! wrong).

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use crate::e2b::reply::Failure;

/// The body of `request` as `T`, at most `limit` bytes; an empty body is
/// `{}`.
pub async fn json<T: DeserializeOwned>(
    request: Request<Incoming>,
    limit: usize,
) -> Result<T, Failure> {
    let collected = Limited::new(request.into_body(), limit)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<http_body_util::LengthLimitError>() {
                Failure::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than {limit} bytes"),
                )
            } else {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    format!("the body could not be read: {error}"),
                )
            }
        })?;
    let bytes = collected.to_bytes();
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(bytes).map_err(|error| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not the JSON this call takes: {error}"),
        )
    })
}
