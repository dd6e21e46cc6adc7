//! Credentials bound to hosts, which the guest uses but never sees.
//!
//! The embedder binds each [`Secret`] to host names; the guest's
//! environment gets only a placeholder per secret ([`Secrets::placeholders`]).
//! A guest connection to a host some secret is bound to is handed to the
//! HTTP proxy here instead of being spliced:
//!
//! - `intercept_tls` ends the guest's TLS with a leaf certificate from the
//!   sandbox's own [`SandboxCa`] (only its certificate is in the guest's
//!   trust store), then serves HTTP on it;
//! - `serve_http` reads each request with hyper, checks its host,
//!   replaces placeholders of secrets bound to that host with their values
//!   and refuses placeholders of any other secret (`HttpRefusal`);
//! - the request goes on over an `Upstream` connection the host makes,
//!   with TLS verified against real roots (`upstream_client_config`);
//!   bodies stream through unchanged both ways.
//!
//! Modules: `secret` (one credential), `set` (the placeholders and their
//! replacement), `ca`, `request` (the checks on one request head),
//! `upstream`, `http` (the proxy), `untrusted` (TLS that failed over an
//! untrusted certificate). Placeholders and the CA's name come from
//! `airlock-random`, the host's one random source.
//!
//! A value never appears in `Debug`, `Display` or a log; only the names of
//! secrets do.

mod ca;
pub(crate) mod http;
pub(crate) mod request;
mod secret;
mod set;
mod untrusted;
pub(crate) mod upstream;

#[cfg(test)]
mod test_servers;

pub(crate) use self::http::{intercept_tls, serve_http, HttpGate};
pub use airlock_random::RandomError;
pub use ca::{CaError, CaParts, SandboxCa};
#[cfg(feature = "fuzzing")]
pub(crate) use request::prepare as prepare_request;
pub(crate) use request::HttpRefusal;
pub use secret::{Secret, SecretError};
pub use set::{Leak, Secrets, SecretsError};
pub(crate) use untrusted::Untrusted;
pub use upstream::UpstreamError;
pub(crate) use upstream::{upstream_client_config, Upstream};
