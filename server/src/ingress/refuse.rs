//! The answers the ingress gives itself: refusals (400, 404, 401, 429, 502, 503),
//! the token's redirect, each a short text that says what happened and
//! what to do.

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::{BodyExt, Full};

/// The body of every answer the ingress sends.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A whole body.
pub fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A plain-text answer with `status`.
pub fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(full(format!("{message}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// 400: a request that names its host or token more than once.
pub fn bad_request(message: String) -> Response<Body> {
    text(StatusCode::BAD_REQUEST, message)
}

/// 429: an address refused too often lately, with when to retry.
pub fn too_many_refusals(client: std::net::IpAddr, retry: std::time::Duration) -> Response<Body> {
    let secs = retry.as_secs().max(1);
    let mut response = text(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many refused requests from {client} (unknown addresses or missing tokens);              retry in {secs} s"
        ),
    );
    if let Ok(value) = header::HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// 404: no route, or no such sandbox.
pub fn not_found(message: String) -> Response<Body> {
    text(StatusCode::NOT_FOUND, message)
}

/// 401: no token, or the wrong one.
pub fn unauthorized(sandbox: &str, port: u16, presented: bool) -> Response<Body> {
    let what = if presented {
        "the traffic token is not this sandbox's"
    } else {
        "this port is private and the request carries no traffic token"
    };
    text(
        StatusCode::UNAUTHORIZED,
        format!(
            "sandbox {sandbox} port {port}: {what}; send it in the X-Airlock-Token header or \
             open the URL `airlock sandbox expose {sandbox} {port}` prints"
        ),
    )
}

/// 502: nothing listens, or the guest could not be reached.
pub fn bad_gateway(sandbox: &str, port: u16, reason: &str) -> Response<Body> {
    text(
        StatusCode::BAD_GATEWAY,
        format!(
            "sandbox {sandbox} port {port}: {reason}; start a server on that port in the sandbox"
        ),
    )
}

/// 503: too many connections to the sandbox, or it cannot run now.
pub fn unavailable(sandbox: &str, message: String) -> Response<Body> {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("sandbox {sandbox}: {message}"),
    )
}

/// 303 to `location`, setting the token as a cookie for `path` on this
/// host only.
pub fn token_redirect(location: &str, token: &str, path: &str, secure: bool) -> Response<Body> {
    let mut response = text(StatusCode::SEE_OTHER, format!("see {location}"));
    let secure = if secure { "; Secure" } else { "" };
    let cookie = format!(
        "{}={token}; Path={path}; HttpOnly; SameSite=Lax{secure}",
        super::token::PARAM
    );
    if let (Ok(location), Ok(cookie)) = (location.parse(), cookie.parse()) {
        response.headers_mut().insert(header::LOCATION, location);
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}
