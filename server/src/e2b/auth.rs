//! Who calls the front: the control plane's `X-API-KEY` (or
//! `Authorization: Bearer KEY`) against the server's keys, and a sandbox
//! request's `X-Access-Token` against the sandbox's own token.
//!
//! Failures count against the client's address as the gRPC listener's do
//! (`throttle`): past a few, the address is refused for a while. A failure
//! is logged with the peer and why, never with what was presented.

use std::net::IpAddr;

use http::{HeaderMap, StatusCode};

use airlock_api::auth::bearer_key;

use super::reply::Failure;
use super::Front;
use crate::ingress::token;
use crate::metrics::AuthCause;
use crate::principal::Principal;
use crate::registry::Entry;

/// E2B's API-key header.
pub const API_KEY_HEADER: &str = "x-api-key";
/// E2B's envd access-token header.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// E2B's traffic access-token header: the code-interpreter SDKs send only
/// this one on their `/contexts` calls (the control plane returns the
/// sandbox's token as `trafficAccessToken` too).
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// The principal of a control-plane request, or E2B's 401 (429 for an
/// address refused too often).
pub fn api_key(front: &Front, headers: &HeaderMap, peer: IpAddr) -> Result<Principal, Failure> {
    blocked(front, peer)?;
    let presented = headers
        .get(API_KEY_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .or_else(|| {
            headers
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(bearer_key)
        });
    let Some(presented) = presented else {
        return Err(refuse(
            front,
            peer,
            AuthCause::Missing,
            "no API key: send X-API-KEY (E2B_API_KEY)",
        ));
    };
    match front.state().keys.verify(presented) {
        Some(key) => Ok(Principal::Key(key.name)),
        None => Err(refuse(
            front,
            peer,
            AuthCause::Unknown,
            "invalid API key: an unknown or removed key (create one with `airlock key create`)",
        )),
    }
}

/// Whether a sandbox request may reach `entry`: its `X-Access-Token` must
/// be the sandbox's token. `Err` is E2B's 401.
pub fn access(
    front: &Front,
    headers: &HeaderMap,
    peer: IpAddr,
    entry: &Entry,
) -> Result<(), Failure> {
    blocked(front, peer)?;
    let presented = headers
        .get(ACCESS_TOKEN_HEADER)
        .or_else(|| headers.get(TRAFFIC_TOKEN_HEADER))
        .and_then(|value| value.to_str().ok());
    match presented {
        Some(presented) if token::matches(&entry.record.ingress_token, presented) => Ok(()),
        Some(_) => Err(refuse(
            front,
            peer,
            AuthCause::Unknown,
            "the X-Access-Token is not this sandbox's",
        )),
        None => Err(refuse(
            front,
            peer,
            AuthCause::Missing,
            "no X-Access-Token: send the envdAccessToken the sandbox was created with",
        )),
    }
}

fn blocked(front: &Front, peer: IpAddr) -> Result<(), Failure> {
    match front.throttle.blocked_for(peer) {
        Some(wait) => {
            count(front, AuthCause::Throttled);
            Err(Failure::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many failed authentications from {peer}; retry in {} s",
                    wait.as_secs().max(1)
                ),
            ))
        }
        None => Ok(()),
    }
}

fn count(front: &Front, cause: AuthCause) {
    if let Some(metrics) = &front.state().metrics {
        metrics.auth_failed(crate::metrics::Front::E2b, cause);
    }
}

fn refuse(front: &Front, peer: IpAddr, cause: AuthCause, why: &'static str) -> Failure {
    count(front, cause);
    front.throttle.failed(peer);
    tracing::warn!(%peer, why, "e2b: authentication failed");
    Failure::new(StatusCode::UNAUTHORIZED, why)
}
