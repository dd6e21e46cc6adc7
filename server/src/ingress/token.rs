//! Traffic tokens: what a request to a sandbox's private port must carry,
//! made here, read from a request (the `X-Airlock-Token` header, the
//! `airlock_token` cookie or query parameter) and compared in constant
//! time.

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
    match airlock::random::bytes::<TOKEN_BYTES>() {
        Ok(bytes) => format!(
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

/// A request that names its token more than once in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguous {
    #[error("more than one X-Airlock-Token header")]
    Headers,
    #[error("more than one airlock_token query parameter")]
    Query,
}

/// The one token a request presents, if any: its `X-Airlock-Token`
/// header, else its query's `airlock_token`, else its first cookie of that
/// name (a browser sends the cookie of the longest path first). Two headers
/// or two query parameters are refused rather than tried in turn.
pub fn presented(headers: &HeaderMap, query: Option<&str>) -> Result<Option<String>, Ambiguous> {
    let mut in_headers = headers.get_all(HEADER).iter();
    let header = in_headers.next();
    if in_headers.next().is_some() {
        return Err(Ambiguous::Headers);
    }
    let mut in_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, _)| *name == PARAM)
        .map(|(_, value)| value);
    let from_query = in_query.next();
    if in_query.next().is_some() {
        return Err(Ambiguous::Query);
    }
    if let Some(value) = header {
        // A header that is not text matches no token.
        return Ok(Some(
            value
                .to_str()
                .map_or_else(|_| String::new(), |t| t.trim().to_owned()),
        ));
    }
    if let Some(value) = from_query {
        return Ok(Some(value.to_owned()));
    }
    let cookie = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|text| text.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == PARAM)
        .map(|(_, value)| value.to_owned());
    Ok(cookie)
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
        assert_eq!(
            presented(&headers, Some("x=1&airlock_token=at_q")),
            Ok(Some("at_h".to_owned()))
        );
        let mut cookies = HeaderMap::new();
        cookies.append(
            COOKIE,
            "airlock_token=at_c1; airlock_token=at_c2".parse().unwrap(),
        );
        cookies.append(COOKIE, "airlock_token=at_c3".parse().unwrap());
        assert_eq!(
            presented(&cookies, Some("airlock_token=at_q")),
            Ok(Some("at_q".to_owned()))
        );
        assert_eq!(presented(&cookies, None), Ok(Some("at_c1".to_owned())));
        assert_eq!(presented(&HeaderMap::new(), Some("x=1")), Ok(None));
        strip(&mut headers);
        assert!(headers.get(HEADER).is_none());
        assert_eq!(headers.get(COOKIE).unwrap(), "a=1; b=2");
        assert_eq!(
            query_without_token("x=1&airlock_token=at_q").as_deref(),
            Some("x=1")
        );
        assert_eq!(query_without_token("airlock_token=at_q"), None);
    }

    #[test]
    fn a_token_named_twice_in_one_place_is_refused() {
        let mut headers = HeaderMap::new();
        headers.append(HEADER, "at_wrong".parse().unwrap());
        headers.append(HEADER, "at_right".parse().unwrap());
        assert_eq!(presented(&headers, None), Err(Ambiguous::Headers));
        assert_eq!(
            presented(&HeaderMap::new(), Some("airlock_token=a&airlock_token=b")),
            Err(Ambiguous::Query)
        );
    }
}
