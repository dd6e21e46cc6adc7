//! Traffic tokens: what a request to a sandbox's private port must carry,
//! made here, read from a request (the `X-Airlock-Token` header, the
//! `airlock_token` cookie or query parameter) and compared in constant
//! time.

use std::io::Read;

use base64::Engine as _;
use http::header::COOKIE;
use http::HeaderMap;
use subtle::ConstantTimeEq;

/// The header a client sends the token in.
pub const HEADER: &str = "x-airlock-token";
/// The query parameter (answered with a cookie and a redirect) and the
/// cookie's name.
pub const PARAM: &str = "airlock_token";
/// Random bytes in a token.
const TOKEN_BYTES: usize = 24;
/// Marks a token, so that a leaked one is recognised.
const PREFIX: &str = "at_";

/// A new token: the prefix and 192 random bits in base64url. Falls back
/// to nothing: a server that cannot read `/dev/urandom` makes none, and
/// an empty token matches no request.
pub fn new() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)) {
        Ok(()) => format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        ),
        Err(error) => {
            tracing::error!(%error, "cannot read /dev/urandom for a traffic token");
            String::new()
        }
    }
}

/// Whether `presented` is `token` (never for an empty token).
pub fn matches(token: &str, presented: &str) -> bool {
    !token.is_empty() && bool::from(token.as_bytes().ct_eq(presented.as_bytes()))
}

/// Every token a request presents: its header, its cookies of that name
/// (a browser may send several, one per path) and `query`'s parameter.
pub fn presented(headers: &HeaderMap, query: Option<&str>) -> Vec<String> {
    let mut found = Vec::new();
    for value in headers.get_all(HEADER) {
        if let Ok(text) = value.to_str() {
            found.push(text.trim().to_owned());
        }
    }
    for value in headers.get_all(COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        for pair in text.split(';') {
            if let Some((name, value)) = pair.trim().split_once('=') {
                if name == PARAM {
                    found.push(value.to_owned());
                }
            }
        }
    }
    if let Some(value) = query.and_then(query_token) {
        found.push(value);
    }
    found
}

/// The token in a query string, if it has one.
pub fn query_token(query: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == PARAM)
        .map(|(_, value)| value.to_owned())
}

/// The query string without the token parameter (`None` when nothing is
/// left).
pub fn query_without_token(query: &str) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(PARAM))
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Takes the token out of what is sent on to the guest: the header and
/// the cookie (other cookies stay).
pub fn strip(headers: &mut HeaderMap) {
    headers.remove(HEADER);
    let cookies: Vec<String> = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|text| text.split(';').map(|p| p.trim().to_owned()))
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(PARAM))
        .collect();
    headers.remove(COOKIE);
    if !cookies.is_empty() {
        if let Ok(value) = cookies.join("; ").parse() {
            headers.insert(COOKIE, value);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_compared_exactly() {
        let (a, b) = (new(), new());
        assert!(a.starts_with(PREFIX) && a.len() > 30, "{a}");
        assert_ne!(a, b);
        assert!(matches(&a, &a));
        assert!(!matches(&a, &b));
        assert!(!matches("", ""));
    }

    #[test]
    fn a_token_is_found_in_the_header_a_cookie_or_the_query() {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, "at_h".parse().unwrap());
        headers.insert(COOKIE, "a=1; airlock_token=at_c; b=2".parse().unwrap());
        let found = presented(&headers, Some("x=1&airlock_token=at_q"));
        assert_eq!(found, ["at_h", "at_c", "at_q"]);
        strip(&mut headers);
        assert!(headers.get(HEADER).is_none());
        assert_eq!(headers.get(COOKIE).unwrap(), "a=1; b=2");
        assert_eq!(
            query_without_token("x=1&airlock_token=at_q").as_deref(),
            Some("x=1")
        );
        assert_eq!(query_without_token("airlock_token=at_q"), None);
    }
}
