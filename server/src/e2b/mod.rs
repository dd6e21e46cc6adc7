//! The E2B-compatible front: E2B's own SDKs (`e2b`, `e2b_code_interpreter`,
//! `@e2b/code-interpreter`), unmodified, against this server.
//!
//! ```text
//! E2B SDK ─ HTTP/1.1 or HTTP/2 (TLS, or plain on loopback) ─> listener (`serve`)
//!   ─> route (`route`): E2b-Sandbox-Id + E2b-Sandbox-Port headers, or a
//!      Host of PORT-ID.DOMAIN: a sandbox's port; anything else: the control plane
//!   ─> control plane (`control`): X-API-KEY ─> Principal; REST and JSON as
//!      E2B's OpenAPI contract has it
//!   ─> port 49983 (`envd`): X-Access-Token ─> the sandbox's call (`target`);
//!      the process and filesystem services over the Connect protocol,
//!      `/files`, `/health`
//!   ─> port 49999 (`interpreter`): `/execute`, `/contexts`
//!   ─> any other port: the ingress, with its traffic-token rules
//! ```
//!
//! Every handler translates into `airlock.api.v1` calls on the server's own
//! services, in process ([`Services`](crate::service::Services)), so keys,
//! tenancy, quotas, validation, network policy and lifetimes are the same
//! code as every other front's; the guest keeps its one protocol. Errors go
//! out in E2B's shapes (`reply`).

mod auth;
mod connect;
mod control;
mod envd;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod ingress;
mod interpreter;
mod reply;
mod route;
mod serve;
mod target;

pub(crate) use serve::serve;

use crate::listen::TcpEndpoint;

/// The default domain of the front: sandboxes' ports at
/// `PORT-ID.e2b.localhost`, the control plane at `api.e2b.localhost`.
pub const DEFAULT_DOMAIN: &str = "e2b.localhost";

/// envd's port in an E2B sandbox: processes, files, health.
pub const ENVD_PORT: u16 = 49983;

/// The code interpreter's port in an E2B sandbox.
pub const INTERPRETER_PORT: u16 = 49999;

/// The front's listener and its domain.
#[derive(Debug)]
pub struct E2bListener {
    pub endpoint: TcpEndpoint,
    pub domain: String,
}

/// What every request of the front shares.
#[derive(Debug)]
pub(crate) struct Front {
    /// The server's services, called in process.
    pub services: crate::service::Services,
    /// The domain of `PORT-ID.DOMAIN` hosts and of `api.DOMAIN`.
    pub domain: String,
    /// Failed authentications per client address (`auth`).
    pub throttle: airlock_api::throttle::Throttle,
}

impl Front {
    /// The server's shared state.
    pub fn state(&self) -> &std::sync::Arc<crate::state::State> {
        &self.services.state
    }
}
