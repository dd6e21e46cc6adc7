//! Signed `/files` URLs (the SDKs' `download_url` / `upload_url`): a
//! request without `X-Access-Token` may read (GET) or write (POST) the
//! one file its URL names when its `signature` is E2B's v1 signature of
//! that path, operation and user with the sandbox's access token:
//! `"v1_" + base64(sha256("PATH:OPERATION:USER:TOKEN[:EXPIRATION]"))`
//! (standard base64, no padding), and `signature_expiration`, when given,
//! is not past.

use base64::Engine;
use http::{Method, Uri};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Whether a `/files` request of `method` to `uri` carries a valid
/// signature made with `token`.
pub fn allows(method: &Method, uri: &Uri, token: &str) -> bool {
    allows_at(method, uri, token, now())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(u64::MAX)
}

fn allows_at(method: &Method, uri: &Uri, token: &str, now: u64) -> bool {
    if uri.path() != "/files" || token.is_empty() {
        return false;
    }
    let operation = match *method {
        Method::GET => "read",
        Method::POST => "write",
        _ => return false,
    };
    let (mut path, mut user, mut signature, mut expiration) = (None, None, None, None);
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        let slot = match name.as_ref() {
            "path" => &mut path,
            "username" => &mut user,
            "signature" => &mut signature,
            "signature_expiration" => &mut expiration,
            _ => continue,
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(value.into_owned());
    }
    let (Some(path), Some(signature)) = (path, signature) else {
        return false;
    };
    let user = user.unwrap_or_default();
    let raw = match &expiration {
        Some(expiration) => {
            match expiration.parse::<u64>() {
                Ok(at) if at >= now => {}
                _ => return false,
            }
            format!("{path}:{operation}:{user}:{token}:{expiration}")
        }
        None => format!("{path}:{operation}:{user}:{token}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    let expected = format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    );
    expected.as_bytes().ct_eq(signature.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(path: &str, operation: &str, token: &str, expiration: Option<u64>) -> String {
        let raw = match expiration {
            Some(at) => format!("{path}:{operation}::{token}:{at}"),
            None => format!("{path}:{operation}::{token}"),
        };
        let digest = Sha256::digest(raw.as_bytes());
        let signature = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        );
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("path", path)
            .append_pair("signature", &signature);
        if let Some(at) = expiration {
            query.append_pair("signature_expiration", &at.to_string());
        }
        format!("/files?{}", query.finish())
    }

    #[test]
    fn a_signature_names_its_file_operation_and_time() {
        let read: Uri = signed("/tmp/a", "read", "tok", None).parse().unwrap();
        assert!(allows_at(&Method::GET, &read, "tok", 100));
        assert!(!allows_at(&Method::POST, &read, "tok", 100));
        assert!(!allows_at(&Method::GET, &read, "other", 100));
        let later: Uri = signed("/tmp/a", "write", "tok", Some(200)).parse().unwrap();
        assert!(allows_at(&Method::POST, &later, "tok", 150));
        assert!(!allows_at(&Method::POST, &later, "tok", 201));
        let moved: Uri = signed("/tmp/a", "read", "tok", None)
            .replace("%2Ftmp%2Fa", "%2Ftmp%2Fb")
            .parse()
            .unwrap();
        assert!(!allows_at(&Method::GET, &moved, "tok", 100));
        let unsigned: Uri = "/files?path=/tmp/a".parse().unwrap();
        assert!(!allows_at(&Method::GET, &unsigned, "tok", 100));
    }
}
