//! The services of `airlock.api.v1`, thin: each call makes its [`Call`](call::Call)
//! (the principal, admission), checks its request, finds the caller's
//! sandbox through the call, calls the library, and maps the answer
//! (`convert`) or the error (`status`).
//!
//! - `call`: `Call`, the preamble every handler shares.
//! - `sandboxes`: the lifecycle (`create` parses a create request into a
//!   typed value, section by section).
//! - `processes`: programs, streamed (the server's `relays` let `Wait`
//!   listen to a stream that is attached).
//! - `files`: files, trees, tar streams, change trackers.
//! - `code`: cells and contexts.
//! - `network`: rules and audit.
//! - `ingress`: a guest port's address and token, and forwarded
//!   connections.
//! - `events`: lifecycle events watched, and webhooks registered.
//! - `keys`: API keys (the owner's).
//! - `usage`: the usage ledger queried.
//! - `workspaces`: named workspaces (make, list, remove).
//! - `templates`: templates built through the API and listed
//!   (`templates_build`: a build's header, events and errors).

pub mod call;
pub mod code;
pub mod create;
pub mod events;
pub mod files;
pub mod ingress;
pub mod keys;
pub mod network;
pub mod processes;
pub mod sandboxes;
pub mod snapshots;
pub mod templates;
pub mod templates_build;
pub mod usage;
pub mod workspaces;

use std::sync::Arc;

use crate::state::State;

/// One value behind every service, cheap to clone.
#[derive(Debug, Clone)]
pub struct Services {
    pub(crate) state: Arc<State>,
    /// Whether the server has a TLS listener (for `Ping`'s features).
    pub(crate) tls: bool,
    /// Whether it serves gRPC-Web.
    pub(crate) grpc_web: bool,
}
