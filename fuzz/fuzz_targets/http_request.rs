//! The HTTP gate's check and rewrite of one request head
//! (the gateway's `secrets::request::prepare`): the request a guest sends on a
//! connection to a host some secret is bound to, parsed as hyper parses it.
//!
//! Input: `[host choice: u8][request head]`, where `{API}`, `{KEY}`,
//! `{ELSE}` and `{WILD}` stand for the secrets' placeholders.
//!
//! Invariants: a request that passes names the connection's host in one
//! Host header and an origin-form target, holds no placeholder and no
//! hop-by-hop header, and holds a secret's value only when that secret is
//! bound to the host (or the guest wrote the value itself); a request
//! refused for a placeholder did carry one not bound to the host.
#![no_main]

use airlock_gateway::fuzzing::{prepare_request, HttpRefusal};
use airlock_fuzz::{
    bound, count, holds_placeholder, host_of_header, placeholder, secrets, with_placeholders,
    Input, HOSTS, SECRETS,
};
use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Uri};
use libfuzzer_sys::fuzz_target;

const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
    "upgrade",
];

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let host = HOSTS[usize::from(input.u8()) % HOSTS.len()];
    let head = with_placeholders(input.rest());
    let Some(mut parts) = parse(&head) else {
        return;
    };
    let before = text(&parts);
    let connection_named: Vec<HeaderName> = parts
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();

    match prepare_request(&mut parts, host, secrets()) {
        Ok(()) => {
            let after = text(&parts);
            assert!(parts.method != Method::CONNECT);
            assert!(
                parts.uri.scheme().is_none() && parts.uri.authority().is_none(),
                "the target {} is not origin-form",
                parts.uri
            );
            let hosts: Vec<&HeaderValue> =
                parts.headers.get_all(http::header::HOST).iter().collect();
            let [value] = hosts[..] else {
                panic!("{} Host headers forwarded", hosts.len())
            };
            let value = value.to_str().expect("a Host header that is not text");
            let named = host_of_header(value);
            assert_eq!(named, host, "forwarded to another host");
            if let Some(name) = holds_placeholder(&after) {
                panic!("the placeholder of {name} was forwarded");
            }
            for name in HOP_BY_HOP {
                assert!(!parts.headers.contains_key(name), "{name} was forwarded");
            }
            for name in connection_named {
                let kept = [
                    http::header::HOST,
                    http::header::CONTENT_LENGTH,
                    http::header::TRANSFER_ENCODING,
                ];
                assert!(
                    kept.contains(&name) || !parts.headers.contains_key(&name),
                    "{name}, named by Connection, was forwarded"
                );
            }
            for secret in SECRETS {
                if !bound(&secret, host) {
                    assert!(
                        count(&after, secret.value.as_bytes())
                            <= count(&before, secret.value.as_bytes()),
                        "the value of {} went to {host}",
                        secret.name
                    );
                }
            }
        }
        Err(HttpRefusal::PlaceholderElsewhere { secret }) => {
            let fixture = SECRETS
                .iter()
                .find(|s| s.name == secret)
                .expect("refused for a secret that does not exist");
            assert!(!bound(fixture, host), "refused {secret} on its own host");
            assert!(
                count(&before, placeholder(&secret).as_bytes()) > 0,
                "refused for a placeholder the request does not hold"
            );
        }
        Err(HttpRefusal::HostMismatch { .. } | HttpRefusal::Malformed { .. }) => {}
    }
});

/// The head as hyper's server reads it (httparse, then http's types), or
/// `None` where hyper would answer 400 itself.
fn parse(head: &[u8]) -> Option<Parts> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(_) = request.parse(head).ok()? else {
        return None;
    };
    let mut builder = http::Request::builder()
        .method(Method::from_bytes(request.method?.as_bytes()).ok()?)
        .uri(Uri::try_from(request.path?).ok()?)
        .version(match request.version? {
            0 => http::Version::HTTP_10,
            _ => http::Version::HTTP_11,
        });
    for header in request.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(header.value).ok()?;
        builder = builder.header(name, value);
    }
    Some(builder.body(()).ok()?.into_parts().0)
}

/// The target and every header, as bytes, for counting what they hold.
fn text(parts: &Parts) -> Vec<u8> {
    let mut out = parts.uri.to_string().into_bytes();
    for (name, value) in &parts.headers {
        out.push(b'\n');
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
    }
    out
}
