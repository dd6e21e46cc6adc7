//! HTTP ingress: requests from outside to servers that programs started
//! in sandboxes, private by default.
//!
//! ```text
//! client ─ HTTP/1.1 or HTTP/2 (TLS) ─> listener (`serve`)
//!   ─> route (`route`): `{port}-{id}.{domain}` or `/_sandbox/{id}/{port}/`
//!   ─> an address refused too often lately: 429 (`probes`)
//!   ─> one Host (400), sandbox (404), one token (`token`; 400, 401) unless
//!      the port is public
//!   ─> Sandbox::connect_port (resumes a paused one; 502 when nothing listens)
//!   ─> the request, HTTP/1.1 to the guest's server (`proxy`), the response
//!      streamed back; an Upgrade (WebSocket) becomes a tunnel both ways
//! ```
//!
//! Each refusal and each accepted connection goes to the sandbox's audit
//! log (`Sandbox::record_ingress`). The bounds are in [`bounds`].

pub mod bounds;
mod proxy;
pub(crate) mod refuse;
pub mod route;
mod serve;
pub mod token;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::listen::TcpEndpoint;

pub(crate) use serve::handle_routed;
pub use serve::serve;

/// The ingress's default domain: browsers resolve every `*.localhost` name
/// to loopback.
pub const DEFAULT_DOMAIN: &str = "airlock.localhost";

/// The ingress listener and its domain.
#[derive(Debug)]
pub struct IngressListener {
    pub endpoint: TcpEndpoint,
    pub domain: String,
}

/// What the API tells about the ingress (`Ingress.GetHost`), and what the
/// ingress's requests share.
#[derive(Debug)]
pub struct Ingress {
    /// Where it listens.
    pub address: SocketAddr,
    pub domain: String,
    pub tls: bool,
    /// Connections open per sandbox.
    open: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Refusals (404, 401, 400) per client address: past
    /// [`bounds::FREE_REFUSALS`] an address is answered 429 for a while.
    probes: airlock_api::throttle::Throttle,
}

impl Ingress {
    pub fn new(address: SocketAddr, domain: String, tls: bool) -> Self {
        Ingress {
            address,
            domain,
            tls,
            open: Mutex::new(HashMap::new()),
            probes: airlock_api::throttle::Throttle::with_free_failures(bounds::FREE_REFUSALS),
        }
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// `:PORT` unless it is the scheme's own.
    fn port_suffix(&self) -> String {
        match (self.tls, self.address.port()) {
            (false, 80) | (true, 443) => String::new(),
            (_, port) => format!(":{port}"),
        }
    }

    /// The Host of guest `port` of `sandbox`.
    pub fn host(&self, sandbox: &str, port: u16) -> String {
        format!(
            "{port}-{}.{}{}",
            sandbox.to_ascii_lowercase(),
            self.domain,
            self.port_suffix()
        )
    }

    /// The URL of guest `port` of `sandbox` by host, with `token` in the
    /// query unless it is empty.
    pub fn url(&self, sandbox: &str, port: u16, token: &str) -> String {
        let query = if token.is_empty() {
            String::new()
        } else {
            format!("?{}={token}", token::PARAM)
        };
        format!("{}://{}/{query}", self.scheme(), self.host(sandbox, port))
    }

    /// The URL of guest `port` of `sandbox` by path.
    pub fn path_url(&self, sandbox: &str, port: u16) -> String {
        format!(
            "{}://{}{}{sandbox}/{port}/",
            self.scheme(),
            self.address,
            route::PATH_PREFIX
        )
    }

    /// A place for one more connection to `sandbox`, or `None` when it
    /// has [`bounds::MAX_CONNECTIONS_PER_SANDBOX`] open.
    fn admit(&self, sandbox: &str) -> Option<OwnedSemaphorePermit> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, s| s.available_permits() < bounds::MAX_CONNECTIONS_PER_SANDBOX);
        let semaphore = open
            .entry(sandbox.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(bounds::MAX_CONNECTIONS_PER_SANDBOX)));
        Arc::clone(semaphore).try_acquire_owned().ok()
    }
}
