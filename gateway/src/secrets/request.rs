//! What the proxy checks and changes in each request and response head.
//!
//! [`prepare`] takes a request head from the guest and either makes it
//! fit for the upstream or says why it is refused ([`HttpRefusal`]):
//!
//! 1. its host (the `Host` header, and the authority of an absolute-form
//!    target), port dropped and lowercased, must be the connection's host;
//! 2. hop-by-hop headers go (`Connection` and what it names,
//!    `Proxy-Connection`, `Proxy-Authorization`, `Keep-Alive`, `TE`,
//!    `Upgrade`);
//! 3. in the target and every header value, placeholders of secrets bound
//!    to the host become the values; a placeholder of any other secret
//!    refuses the request;
//! 4. an absolute-form target becomes origin-form, and `Host` names the
//!    target's authority.
//!
//! Bodies are not looked at. `Transfer-Encoding` and `Content-Length` stay
//! for hyper, which frames bodies on both sides.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Uri};
use http::{Method, StatusCode};

use super::secret::normalize_host;
use super::set::Secrets;

/// At most this many characters of a refused host are reported.
const MAX_REPORTED_HOST: usize = 255;

/// Headers that concern one connection, never forwarded.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
    "upgrade",
];

/// Headers a `Connection` header may not remove: the checked host and the
/// body's framing.
const KEPT: [HeaderName; 3] = [
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
];

/// Why the proxy answered a request itself instead of forwarding it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpRefusal {
    /// The request names another host than the connection's (or none).
    #[error("request for {} on a connection to another host", host.as_deref().unwrap_or("no host"))]
    HostMismatch {
        /// The host the request named, if it named one.
        host: Option<String>,
    },
    /// The request carries the placeholder of a secret not bound to the
    /// connection's host.
    #[error("the placeholder of secret {secret} may not be sent to this host")]
    PlaceholderElsewhere {
        /// The secret's name.
        secret: String,
    },
    /// The request cannot be forwarded as it is.
    #[error("malformed request: {what}")]
    Malformed {
        /// What is wrong.
        what: String,
    },
}

impl HttpRefusal {
    /// The status the guest is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            HttpRefusal::HostMismatch { .. } => StatusCode::MISDIRECTED_REQUEST,
            HttpRefusal::PlaceholderElsewhere { .. } => StatusCode::FORBIDDEN,
            HttpRefusal::Malformed { .. } => StatusCode::BAD_REQUEST,
        }
    }

    fn malformed(what: impl Into<String>) -> Self {
        HttpRefusal::Malformed { what: what.into() }
    }
}

/// Checks and rewrites a request head bound for `expected_host` (already
/// normalized), as the module's doc says.
pub(crate) fn prepare(
    parts: &mut Parts,
    expected_host: &str,
    secrets: &Secrets,
) -> Result<(), HttpRefusal> {
    if parts.method == Method::CONNECT {
        return Err(HttpRefusal::malformed("CONNECT is not served here"));
    }
    let target_authority = check_host(parts, expected_host)?;
    strip_hop_by_hop(&mut parts.headers);
    replace_in_headers(&mut parts.headers, expected_host, secrets)?;
    parts.uri = replace_in_target(&parts.uri, expected_host, secrets)?;
    if let Some(authority) = target_authority {
        let host = HeaderValue::from_str(&authority)
            .map_err(|_| HttpRefusal::malformed("the target's authority is not a header value"))?;
        parts.headers.insert(header::HOST, host);
    }
    Ok(())
}

/// Removes what only concerns one connection from a request or response.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .filter(|name| !KEPT.contains(name))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Checks the request's host; the target's authority (without user
/// information) when the target is absolute-form.
fn check_host(parts: &Parts, expected_host: &str) -> Result<Option<String>, HttpRefusal> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let header_host = hosts.next();
    if hosts.next().is_some() {
        return Err(HttpRefusal::malformed("more than one Host header"));
    }
    let target = parts.uri.authority();
    if header_host.is_none() && target.is_none() {
        return Err(HttpRefusal::HostMismatch { host: None });
    }
    if let Some(value) = header_host {
        let authority = value
            .to_str()
            .ok()
            .filter(|v| !v.contains('@'))
            .and_then(|v| v.parse::<Authority>().ok());
        match authority {
            Some(a) if host_of(&a) == expected_host && numeric_port(&a) => {}
            Some(a) if numeric_port(&a) => return Err(mismatch(&host_of(&a))),
            Some(a) => return Err(mismatch(a.as_str())),
            None => return Err(mismatch(&String::from_utf8_lossy(value.as_bytes()))),
        }
    }
    match target {
        Some(a) if host_of(a) == expected_host && numeric_port(a) => Ok(Some(match a.port() {
            Some(port) => format!("{}:{port}", a.host()),
            None => a.host().to_owned(),
        })),
        Some(a) if numeric_port(a) => Err(mismatch(&host_of(a))),
        Some(a) => Err(mismatch(a.as_str())),
        None => Ok(None),
    }
}

/// Whether whatever follows the authority's host is a port: `:` and
/// digits, or nothing. `http` takes `api.test:x` as host `api.test` with no
/// port, but the upstream would see the whole text as the host.
fn numeric_port(authority: &Authority) -> bool {
    let text = authority.as_str();
    let host_port = text
        .rsplit_once('@')
        .map_or(text, |(_, host_port)| host_port);
    match host_port.strip_prefix(authority.host()) {
        Some("") => true,
        Some(rest) => rest.strip_prefix(':').is_some_and(|port| {
            port.bytes().all(|b| b.is_ascii_digit())
                && (port.is_empty() || port.parse::<u16>().is_ok())
        }),
        None => false,
    }
}

/// An authority's host, normalized, without IPv6 brackets.
fn host_of(authority: &Authority) -> String {
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    normalize_host(host)
}

fn mismatch(host: &str) -> HttpRefusal {
    HttpRefusal::HostMismatch {
        host: Some(host.chars().take(MAX_REPORTED_HOST).collect()),
    }
}

fn replace_in_headers(
    headers: &mut HeaderMap,
    host: &str,
    secrets: &Secrets,
) -> Result<(), HttpRefusal> {
    if secrets.is_empty() {
        return Ok(());
    }
    if let Some(secret) = headers
        .keys()
        .find_map(|name| secrets.find_placeholder(name.as_str().as_bytes()))
    {
        return Err(HttpRefusal::malformed(format!(
            "the placeholder of secret {secret} is in a header name"
        )));
    }
    for (name, value) in headers.iter_mut() {
        let replaced = secrets
            .replace_bytes_for_host(host, value.as_bytes())
            .map_err(|leak| HttpRefusal::PlaceholderElsewhere {
                secret: leak.secret,
            })?;
        if let std::borrow::Cow::Owned(bytes) = replaced {
            let mut new = HeaderValue::from_bytes(&bytes).map_err(|_| {
                HttpRefusal::malformed(format!("header {name} is not valid with the secret in it"))
            })?;
            new.set_sensitive(true);
            *value = new;
        }
    }
    Ok(())
}

/// The target with placeholders replaced, in origin-form.
fn replace_in_target(uri: &Uri, host: &str, secrets: &Secrets) -> Result<Uri, HttpRefusal> {
    let text = uri.to_string();
    let replaced = secrets.replace_for_host(host, &text).map_err(|leak| {
        HttpRefusal::PlaceholderElsewhere {
            secret: leak.secret,
        }
    })?;
    let invalid = || HttpRefusal::malformed("the target is not valid with the secret in it");
    let uri: Uri = if replaced == text {
        uri.clone()
    } else {
        replaced.parse().map_err(|_| invalid())?
    };
    let origin = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Ok(Uri::from(origin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secret;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn secrets() -> Result<Secrets, Box<dyn std::error::Error>> {
        Ok(Secrets::new(vec![
            Secret::new("API", "real value")?.host("api.test"),
            Secret::new("KEY", "k3y")?.host("api.test"),
            Secret::new("ELSE", "else-value")?.host("else.test"),
        ])?)
    }

    fn placeholder(secrets: &Secrets, name: &str) -> String {
        secrets
            .placeholders()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    fn head(builder: http::request::Builder) -> Result<Parts, http::Error> {
        Ok(builder.body(())?.into_parts().0)
    }

    #[test]
    fn host_with_port_and_case_matches_the_connection() -> TestResult {
        let mut parts = head(http::Request::get("/").header("host", "API.Test:8443"))?;
        prepare(&mut parts, "api.test", &secrets()?)?;
        Ok(())
    }

    #[test]
    fn another_or_missing_host_is_misdirected() -> TestResult {
        let mut other = head(http::Request::get("/").header("host", "evil.test"))?;
        let refusal = prepare(&mut other, "api.test", &secrets()?).err();
        assert_eq!(
            refusal,
            Some(HttpRefusal::HostMismatch {
                host: Some("evil.test".into())
            })
        );
        let mut none = head(http::Request::get("/"))?;
        let refusal = prepare(&mut none, "api.test", &secrets()?).err();
        assert_eq!(refusal, Some(HttpRefusal::HostMismatch { host: None }));
        assert_eq!(
            refusal.map(|r| r.status()),
            Some(StatusCode::MISDIRECTED_REQUEST)
        );
        Ok(())
    }

    /// Found by the `http_gate` fuzz target: `Host: api.test:epkon1` was
    /// taken for api.test (the `http` crate reads a port that is not a
    /// number as no port) and went upstream as it was.
    #[test]
    fn a_host_whose_port_is_not_a_number_is_misdirected() -> TestResult {
        for host in [
            "api.test:epkon1",
            "api.test:443x",
            "api.test:99999",
            "api.test:evil.test",
        ] {
            let mut parts = head(http::Request::get("/").header("host", host))?;
            let refusal = prepare(&mut parts, "api.test", &secrets()?).err();
            assert!(
                matches!(refusal, Some(HttpRefusal::HostMismatch { .. })),
                "{host}: {refusal:?}"
            );
        }
        let mut target = head(http::Request::get("http://api.test:x1/"))?;
        assert!(prepare(&mut target, "api.test", &secrets()?).is_err());
        for host in ["api.test", "api.test:", "API.test:8443", "api.test."] {
            let mut parts = head(http::Request::get("/").header("host", host))?;
            prepare(&mut parts, "api.test", &secrets()?)?;
        }
        Ok(())
    }

    #[test]
    fn an_absolute_target_must_name_the_host_too() -> TestResult {
        let mut parts = head(http::Request::get("http://evil.test/x").header("host", "api.test"))?;
        let refusal = prepare(&mut parts, "api.test", &secrets()?).err();
        assert!(matches!(refusal, Some(HttpRefusal::HostMismatch { .. })));
        Ok(())
    }

    #[test]
    fn an_absolute_target_becomes_origin_form_with_its_host() -> TestResult {
        let mut parts = head(http::Request::get("http://user@API.test:8080/x?y=1"))?;
        prepare(&mut parts, "api.test", &secrets()?)?;
        assert_eq!(parts.uri.to_string(), "/x?y=1");
        assert_eq!(
            parts.headers.get("host").map(HeaderValue::as_bytes),
            Some(&b"API.test:8080"[..])
        );
        Ok(())
    }

    #[test]
    fn placeholders_in_headers_and_target_become_the_value() -> TestResult {
        let secrets = secrets()?;
        let p = placeholder(&secrets, "API");
        let k = placeholder(&secrets, "KEY");
        let mut parts = head(
            http::Request::get(format!("/q?key={k}"))
                .header("host", "api.test")
                .header("authorization", format!("Bearer {p}")),
        )?;
        prepare(&mut parts, "api.test", &secrets)?;
        let auth = parts
            .headers
            .get("authorization")
            .map(HeaderValue::as_bytes);
        assert_eq!(auth, Some(&b"Bearer real value"[..]));
        assert!(parts
            .headers
            .get("authorization")
            .is_some_and(HeaderValue::is_sensitive));
        assert_eq!(parts.uri.to_string(), "/q?key=k3y");
        // A space is not valid in a target: the value must be URL-safe there.
        let mut spaced =
            head(http::Request::get(format!("/q?key={p}")).header("host", "api.test"))?;
        let refusal = prepare(&mut spaced, "api.test", &secrets).err();
        assert!(matches!(refusal, Some(HttpRefusal::Malformed { .. })));
        Ok(())
    }

    #[test]
    fn another_secrets_placeholder_is_forbidden_by_name() -> TestResult {
        let secrets = secrets()?;
        let q = placeholder(&secrets, "ELSE");
        for (uri, header) in [(format!("/?k={q}"), String::new()), ("/".into(), q.clone())] {
            let mut parts = head(
                http::Request::get(uri)
                    .header("host", "api.test")
                    .header("x-k", header),
            )?;
            let refusal = prepare(&mut parts, "api.test", &secrets).err();
            assert_eq!(
                refusal,
                Some(HttpRefusal::PlaceholderElsewhere {
                    secret: "ELSE".into()
                })
            );
        }
        Ok(())
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() -> TestResult {
        let mut parts = head(
            http::Request::get("/")
                .header("host", "api.test")
                .header("connection", "keep-alive, x-private, host")
                .header("x-private", "1")
                .header("proxy-connection", "keep-alive")
                .header("proxy-authorization", "Basic abc")
                .header("upgrade", "websocket")
                .header("x-kept", "1"),
        )?;
        prepare(&mut parts, "api.test", &secrets()?)?;
        let names: Vec<&str> = parts.headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["host", "x-kept"]);
        Ok(())
    }

    #[test]
    fn connect_is_refused() -> TestResult {
        let mut parts = head(
            http::Request::builder()
                .method(Method::CONNECT)
                .uri("api.test:443")
                .header("host", "api.test"),
        )?;
        let refusal = prepare(&mut parts, "api.test", &secrets()?).err();
        assert!(matches!(refusal, Some(HttpRefusal::Malformed { .. })));
        Ok(())
    }
}
