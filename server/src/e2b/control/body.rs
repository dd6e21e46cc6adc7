//! A control-plane request's body: bounded ([`MAX_BODY_BYTES`]), then read
//! as the JSON of one E2B request type. Too large is 413, not JSON or not
//! the type's shape is 400 naming what is wrong.

use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use crate::e2b::reply::Failure;

/// The most a control-plane body may hold: E2B's requests are small (a
/// create with 64 labels and 256 variables is well under this).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The body of a request, read whole.
pub async fn bytes(body: Incoming) -> Result<bytes::Bytes, Failure> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
        )),
        Err(error) => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            format!("the request body could not be read: {error}"),
        )),
    }
}

/// The body as JSON of `T`; an empty body is `T`'s default (E2B's optional
/// bodies).
pub async fn json<T: DeserializeOwned + Default>(body: Incoming) -> Result<T, Failure> {
    parse(&bytes(body).await?)
}

/// `bytes` as JSON of `T` (empty: `T::default()`). A value of the wrong
/// type is named by its field (every field of E2B's bodies is optional, so
/// each field is tried alone to find the one at fault).
pub fn parse<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, Failure> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|error| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            format!("the request body is not JSON: {error}"),
        )
    })?;
    serde_json::from_value::<T>(value.clone()).map_err(|error| {
        let field = value.as_object().and_then(|object| {
            object.iter().find_map(|(name, field)| {
                let alone = serde_json::json!({ name.as_str(): field });
                serde_json::from_value::<T>(alone)
                    .err()
                    .map(|_| name.clone())
            })
        });
        let message = match field {
            Some(field) => format!("{field}: {error}"),
            None => format!("the request body is not this call's JSON: {error}"),
        };
        Failure::new(StatusCode::BAD_REQUEST, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    struct Timeout {
        #[serde(default)]
        timeout: u64,
        #[serde(default)]
        other: Option<String>,
    }

    #[test]
    fn json_is_read_and_bad_json_names_the_problem() {
        assert_eq!(
            parse::<Timeout>(br#"{"timeout": 30}"#).map(|t| t.timeout),
            Ok(30)
        );
        assert_eq!(parse::<Timeout>(b"").map(|t| t.timeout), Ok(0));
        let bad = parse::<Timeout>(b"{not json").unwrap_err();
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        let wrong = parse::<Timeout>(br#"{"timeout": "soon"}"#).unwrap_err();
        assert!(wrong.message.starts_with("timeout:"), "{}", wrong.message);
        assert!(parse::<Timeout>(br#"{"timeout": 1, "other": "x"}"#)
            .map(|t| t.other)
            .is_ok());
    }
}
