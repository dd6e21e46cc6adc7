//! Who is calling: the interceptors that put a [`Principal`] on every
//! request. The Unix socket's says "the owner" (the socket is mode 0600);
//! the TCP listener's checks the `authorization: Bearer KEY` of every call
//! against the [`KeyStore`], and refuses a missing, malformed, wrong or
//! removed key with `UNAUTHENTICATED`.
//!
//! Failures are counted per peer address (`throttle`): past a few, that
//! address is refused for a while (`RESOURCE_EXHAUSTED`, `RATE_LIMITED`,
//! saying when to retry), doubling each time, so guessing keys is slow. A
//! valid key does not reset the count (a tenant guessing another tenant's
//! key would reset it with every other call): failures decay instead. A
//! failure is logged with the peer and why, never with what was presented.

use std::net::IpAddr;
use std::sync::Arc;

use tonic::{Request, Status};

use airlock_api::auth::{bearer_key, HEADER};
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::keys::KeyStore;
use crate::metrics::{AuthCause, Front, Metrics};
use crate::principal::Principal;
use airlock_api::throttle::Throttle;

/// Marks every request as the owner's (the Unix socket).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnerOnly;

impl tonic::service::Interceptor for OwnerOnly {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.extensions_mut().insert(Principal::Owner);
        Ok(request)
    }
}

/// Checks the key of every request (the TCP listener).
#[derive(Debug, Clone)]
pub struct KeyAuth {
    keys: Arc<KeyStore>,
    throttle: Arc<Throttle>,
    metrics: Option<Arc<Metrics>>,
}

impl KeyAuth {
    pub fn new(
        keys: Arc<KeyStore>,
        throttle: Arc<Throttle>,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        KeyAuth {
            keys,
            throttle,
            metrics,
        }
    }

    fn count(&self, cause: AuthCause) {
        if let Some(metrics) = &self.metrics {
            metrics.auth_failed(Front::Api, cause);
        }
    }

    fn refuse(&self, peer: Option<IpAddr>, cause: AuthCause, why: &'static str) -> Status {
        self.count(cause);
        if let Some(peer) = peer {
            self.throttle.failed(peer);
        }
        tracing::warn!(peer = ?peer, why, "authentication failed");
        reason::status(
            ErrorReason::Unauthenticated,
            format!(
                "{why}: send `authorization: Bearer KEY` with a key from `airlock key create` \
                 (AIRLOCK_API_KEY for the CLI and the SDKs)"
            ),
        )
    }
}

impl tonic::service::Interceptor for KeyAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let peer = request.remote_addr().map(|addr| addr.ip());
        if let Some(peer) = peer {
            if let Some(wait) = self.throttle.blocked_for(peer) {
                self.count(AuthCause::Throttled);
                return Err(reason::status(
                    ErrorReason::RateLimited,
                    format!(
                        "too many failed authentications from {peer}; retry in {} s",
                        wait.as_secs().max(1)
                    ),
                ));
            }
        }
        let Some(value) = request.metadata().get(HEADER) else {
            return Err(self.refuse(peer, AuthCause::Missing, "no API key"));
        };
        let Some(presented) = value.to_str().ok().and_then(bearer_key) else {
            return Err(self.refuse(
                peer,
                AuthCause::Malformed,
                "a malformed authorization header",
            ));
        };
        let Some(key) = self.keys.verify(presented) else {
            return Err(self.refuse(peer, AuthCause::Unknown, "an unknown or removed API key"));
        };
        request.extensions_mut().insert(Principal::Key(key.name));
        Ok(request)
    }
}
