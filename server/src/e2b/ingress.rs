//! A sandbox's port other than envd's and the code interpreter's, as E2B's
//! `get_host(port)` reaches it: carried by the server's HTTP ingress
//! (`crate::ingress`), with its rules: the sandbox's traffic token unless
//! the port is public, the refusal count per address, the audit log, a
//! paused sandbox resumed.
//!
//! The token is what the ingress reads (`X-Airlock-Token`, its cookie or
//! query parameter), or E2B's names for it: `e2b-traffic-access-token`, or
//! `X-Access-Token` (the `envdAccessToken` a create answered, which is the
//! same token). E2B's names are taken off before the guest sees the
//! request, as the ingress takes off its own.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderMap, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::auth::ACCESS_TOKEN_HEADER;
use super::reply::{self, Body};
use super::Front;
use crate::ingress::{route::Route, token};

/// E2B's traffic-token header.
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// `request` for port `port` of sandbox `id`, through the ingress.
pub(crate) async fn forward(
    front: &Arc<Front>,
    client: SocketAddr,
    mut request: Request<Incoming>,
    id: String,
    port: u16,
    host: Option<String>,
) -> Response<Body> {
    let Some(ingress) = front.state().ingress.clone() else {
        return reply::error_json(
            StatusCode::NOT_IMPLEMENTED,
            &format!(
                "port {port}: this server has no HTTP ingress, which carries a sandbox's other \
                 ports (start it with --ingress)"
            ),
        );
    };
    e2b_token(request.headers_mut());
    let route = Route {
        sandbox: id,
        port,
        prefix: None,
    };
    crate::ingress::handle_routed(front.state(), &ingress, client, request, route, host).await
}

/// E2B's token headers as the ingress's: the first of
/// `e2b-traffic-access-token` and `X-Access-Token` becomes
/// `X-Airlock-Token` unless that is sent; both are taken off.
pub fn e2b_token(headers: &mut HeaderMap) {
    let e2b = headers
        .remove(TRAFFIC_TOKEN_HEADER)
        .into_iter()
        .chain(headers.remove(ACCESS_TOKEN_HEADER))
        .next();
    if let Some(value) = e2b {
        if !headers.contains_key(token::HEADER) {
            headers.insert(token::HEADER, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_tokens_become_the_ingress_token() {
        let mut headers = HeaderMap::new();
        headers.insert(ACCESS_TOKEN_HEADER, "at_x".parse().expect("a value"));
        e2b_token(&mut headers);
        assert_eq!(
            headers.get(token::HEADER).map(|v| v.as_bytes()),
            Some(&b"at_x"[..])
        );
        assert!(headers.get(ACCESS_TOKEN_HEADER).is_none());

        let mut headers = HeaderMap::new();
        headers.insert(token::HEADER, "at_own".parse().expect("a value"));
        headers.insert(TRAFFIC_TOKEN_HEADER, "at_e2b".parse().expect("a value"));
        e2b_token(&mut headers);
        assert_eq!(
            headers.get(token::HEADER).map(|v| v.as_bytes()),
            Some(&b"at_own"[..])
        );
        assert!(headers.get(TRAFFIC_TOKEN_HEADER).is_none());
    }
}
