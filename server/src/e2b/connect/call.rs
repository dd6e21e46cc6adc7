//! What a Connect request's method and headers say about the call: its
//! codec (from the content type), whether it is unary or streaming, and
//! its deadline (`connect-timeout-ms`).

use std::time::Duration;

use http::{header, HeaderMap, Method};

use super::codec::Codec;
use super::error::ConnectError;

/// The header carrying the client's deadline in milliseconds.
pub const TIMEOUT_HEADER: &str = "connect-timeout-ms";
/// The header naming the protocol's version (`1`).
pub const PROTOCOL_VERSION_HEADER: &str = "connect-protocol-version";

/// Unary (one message each way, a bare body) or streaming (enveloped
/// messages, the error in the end-of-stream message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unary,
    Streaming,
}

/// A call's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub kind: Kind,
    pub codec: Codec,
    /// The client's deadline, from `connect-timeout-ms`.
    pub timeout: Option<Duration>,
}

/// Why a request is not a Connect call of the kind its method has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a POST (405).
    Method(Method),
    /// A content type this method does not take (415).
    ContentType(String),
    /// A malformed header (`invalid_argument`).
    Header(ConnectError),
}

impl Call {
    /// The framing of a request for a method of `kind`.
    pub fn of(method: &Method, headers: &HeaderMap, kind: Kind) -> Result<Call, Refusal> {
        if method != Method::POST {
            return Err(Refusal::Method(method.clone()));
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let codec = codec_of(content_type, kind)
            .ok_or_else(|| Refusal::ContentType(content_type.to_owned()))?;
        if let Some(version) = headers.get(PROTOCOL_VERSION_HEADER) {
            if version.as_bytes() != b"1" {
                return Err(Refusal::Header(ConnectError::invalid(format!(
                    "{PROTOCOL_VERSION_HEADER}: {:?}, this server speaks version 1",
                    String::from_utf8_lossy(version.as_bytes())
                ))));
            }
        }
        let timeout = timeout(headers).map_err(Refusal::Header)?;
        Ok(Call {
            kind,
            codec,
            timeout,
        })
    }
}

/// The codec a content type names for `kind`, ignoring parameters
/// (`application/json; charset=utf-8`).
fn codec_of(content_type: &str, kind: Kind) -> Option<Codec> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let name = match kind {
        Kind::Unary => essence.strip_prefix("application/")?,
        Kind::Streaming => essence.strip_prefix("application/connect+")?,
    };
    Codec::from_name(name)
}

/// `connect-timeout-ms`: at most 10 digits, as the protocol has it.
fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, ConnectError> {
    let Some(value) = headers.get(TIMEOUT_HEADER) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("");
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConnectError::invalid(format!(
            "{TIMEOUT_HEADER}: {text:?} is not a count of milliseconds (1 to 10 digits)"
        )));
    }
    Ok(text.parse::<u64>().ok().map(Duration::from_millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("a value"));
        }
        map
    }

    #[test]
    fn the_content_type_names_the_codec_and_the_kind() {
        let call = Call::of(
            &Method::POST,
            &headers(&[
                ("content-type", "application/json; charset=utf-8"),
                (TIMEOUT_HEADER, "1500"),
                (PROTOCOL_VERSION_HEADER, "1"),
            ]),
            Kind::Unary,
        )
        .expect("a call");
        assert_eq!(call.codec, Codec::Json);
        assert_eq!(call.timeout, Some(Duration::from_millis(1500)));
        let call = Call::of(
            &Method::POST,
            &headers(&[("content-type", "application/connect+proto")]),
            Kind::Streaming,
        )
        .expect("a call");
        assert_eq!(call.codec, Codec::Proto);
        assert_eq!(call.timeout, None);
    }

    #[test]
    fn wrong_methods_types_versions_and_timeouts_are_refused() {
        let json = headers(&[("content-type", "application/json")]);
        assert!(matches!(
            Call::of(&Method::GET, &json, Kind::Unary),
            Err(Refusal::Method(_))
        ));
        assert!(matches!(
            Call::of(&Method::POST, &json, Kind::Streaming),
            Err(Refusal::ContentType(_))
        ));
        let bad = headers(&[("content-type", "application/json"), (TIMEOUT_HEADER, "-1")]);
        assert!(matches!(
            Call::of(&Method::POST, &bad, Kind::Unary),
            Err(Refusal::Header(_))
        ));
        let bad = headers(&[
            ("content-type", "application/json"),
            (PROTOCOL_VERSION_HEADER, "2"),
        ]);
        assert!(matches!(
            Call::of(&Method::POST, &bad, Kind::Unary),
            Err(Refusal::Header(_))
        ));
    }
}
