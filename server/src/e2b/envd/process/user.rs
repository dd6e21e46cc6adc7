//! Who a process runs as: E2B's SDKs name the user in `Authorization:
//! Basic base64("USER:")`; without it, E2B's default user `user` (home
//! `/home/user`), falling back to root where the image has no such user.

use base64::Engine;
use http::HeaderMap;

use crate::e2b::connect::ConnectError;

/// E2B's default user.
pub const DEFAULT_USER: &str = "user";

/// The user a request names, or `None` for E2B's default.
pub fn named(headers: &HeaderMap) -> Result<Option<String>, ConnectError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad =
        || ConnectError::invalid("authorization: expected `Basic base64(USER:)` naming the user");
    let text = value.to_str().map_err(|_| bad())?;
    let Some(encoded) = text
        .strip_prefix("Basic ")
        .or_else(|| text.strip_prefix("basic "))
    else {
        return Err(bad());
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let user = decoded.split(':').next().unwrap_or("").to_owned();
    Ok((!user.is_empty()).then_some(user))
}

/// Whether a start failed because the guest has no such user (the
/// agent's words for it).
pub fn is_unknown_user(status: &tonic::Status) -> bool {
    status.message().contains("user not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basic_header_names_the_user() {
        let mut headers = HeaderMap::new();
        assert_eq!(named(&headers), Ok(None));
        headers.insert(
            http::header::AUTHORIZATION,
            "Basic cm9vdDo=".parse().expect("a value"),
        );
        assert_eq!(named(&headers), Ok(Some("root".into())));
        headers.insert(
            http::header::AUTHORIZATION,
            "Bearer x".parse().expect("a value"),
        );
        assert!(named(&headers).is_err());
    }
}
