//! [`Gate`]: every HTTP request must carry `Authorization: Bearer KEY`
//! with a key of the Airlock server. The gate asks the server (a `Ping`
//! sent with that key) on every request and admits the caller with a
//! client that sends the same key on every call the tools make, so what a
//! caller sees and may do (tenancy, quotas) is the server's decision. The
//! server's client connections are kept per key (by its hash) and reused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http::HeaderMap;

use airlock_api::auth::bearer_key;
use airlock_client::api::ErrorReason;
use airlock_client::{Client, Endpoint};
use airlock_report::chain;

use crate::access::{Caller, KeyId};
use airlock_api::throttle::Throttle;

/// Server connections kept (one per key seen lately).
const MAX_CLIENTS: usize = 256;

/// Bad keys a caller address may present before it is refused for a
/// while: fewer than the server allows, which sees this MCP server's address
/// for every caller.
const FREE_KEY_FAILURES: u32 = 3;

/// Why a request is refused before it reaches the tools.
#[derive(Debug)]
pub enum Refusal {
    /// 401: no key, a malformed one, or one the server does not know.
    Unauthorized(String),
    /// 429: too many failures from this address (here or at the server).
    Throttled(String, Option<Duration>),
    /// 502: the server cannot be asked.
    Unavailable(String),
}

/// Checks callers' keys with the server.
#[derive(Debug)]
pub struct Gate {
    url: http::Uri,
    ca_cert: Option<PathBuf>,
    clients: Mutex<HashMap<KeyId, Client>>,
    throttle: Throttle,
}

impl Gate {
    /// A gate for the server at `url` (`https://`, or `http://` on
    /// loopback), trusting `ca_cert` if given.
    pub fn new(url: http::Uri, ca_cert: Option<PathBuf>) -> Gate {
        Gate {
            url,
            ca_cert,
            clients: Mutex::new(HashMap::new()),
            throttle: Throttle::with_free_failures(FREE_KEY_FAILURES),
        }
    }

    fn clients(&self) -> MutexGuard<'_, HashMap<KeyId, Client>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits the caller at `peer` whose request has `headers`, or says
    /// why not.
    pub async fn admit(&self, peer: IpAddr, headers: &HeaderMap) -> Result<Caller, Refusal> {
        if let Some(wait) = self.throttle.blocked_for(peer) {
            return Err(Refusal::Throttled(
                format!(
                    "too many requests with a bad API key from {peer}; retry in {} s",
                    wait.as_secs().max(1)
                ),
                Some(wait),
            ));
        }
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Err(self.refuse(peer, "no API key"));
        };
        let Some(key) = value.to_str().ok().and_then(bearer_key) else {
            return Err(self.refuse(peer, "a malformed authorization header"));
        };
        let id = KeyId::of(key);
        let cached = self.clients().get(&id).cloned();
        let client = match cached {
            Some(client) => client,
            None => {
                let endpoint = Endpoint::Remote {
                    url: self.url.clone(),
                    key: Some(key.to_owned()),
                    ca_cert: self.ca_cert.clone(),
                };
                endpoint.connect().await.map_err(|e| {
                    tracing::warn!(error = %chain(&e), "cannot reach the Airlock server");
                    Refusal::Unavailable(format!(
                        "the MCP server cannot reach the Airlock server at {}: {}",
                        self.url,
                        chain(&e)
                    ))
                })?
            }
        };
        match client.ping().await {
            Ok(_) => {
                let mut clients = self.clients();
                if clients.len() >= MAX_CLIENTS && !clients.contains_key(&id) {
                    if let Some(old) = clients.keys().next().copied() {
                        clients.remove(&old);
                    }
                }
                clients.insert(id, client.clone());
                Ok(Caller { client, key: id })
            }
            Err(error) => {
                self.clients().remove(&id);
                match error.reason() {
                    Some(ErrorReason::Unauthenticated) => {
                        Err(self.refuse(peer, "an unknown or removed API key"))
                    }
                    Some(ErrorReason::RateLimited) => {
                        Err(Refusal::Throttled(error.to_string(), None))
                    }
                    _ => {
                        tracing::warn!(error = %chain(&error), "the Airlock server did not answer a ping");
                        Err(Refusal::Unavailable(format!(
                            "the Airlock server at {} did not answer: {}",
                            self.url,
                            chain(&error)
                        )))
                    }
                }
            }
        }
    }

    fn refuse(&self, peer: IpAddr, why: &str) -> Refusal {
        self.throttle.failed(peer);
        tracing::warn!(%peer, why, "refused an MCP request");
        Refusal::Unauthorized(format!(
            "{why}: send `Authorization: Bearer KEY` with a key of the Airlock server \
             (`airlock key create NAME` makes one)"
        ))
    }
}
