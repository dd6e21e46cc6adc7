//! What an embedder configures about a sandbox's network: the policy, the
//! secrets, how the host resolves names, and the bounds on what the guest
//! may open. (The roots the host trusts upstream besides the public ones
//! are the sandbox's own CA certificates:
//! [`SandboxBuilder::ca_cert`](crate::SandboxBuilder::ca_cert).)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::host::HostAccess;
use super::policy::NetworkPolicy;
use super::resolver::{Resolve, SystemResolver};
use super::secrets::Secret;

/// The default most connections a sandbox has open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The default time a connection may go without a byte either way.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The default time the guest has to send a complete TLS ClientHello or
/// HTTP request head once it sent its first byte.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The default most bytes of an HTTP request head (the request line and
/// headers) the host reads.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

/// A sandbox's network: off unless the builder is given one.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    pub(crate) policy: NetworkPolicy,
    pub(crate) host_access: HostAccess,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) resolver: Arc<dyn Resolve>,
    /// Set at start for an adoptable sandbox: its state directory, where
    /// the audit log is kept on disk as well.
    pub(crate) audit_dir: Option<PathBuf>,
    /// Set at start from the sandbox's CA certificates.
    pub(crate) upstream_roots: Vec<CertificateDer<'static>>,
    pub(crate) max_connections: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) head_timeout: Duration,
    pub(crate) max_header_bytes: usize,
}

impl Default for NetworkOptions {
    fn default() -> Self {
        Self {
            policy: NetworkPolicy::default(),
            host_access: HostAccess::default(),
            secrets: Vec::new(),
            resolver: Arc::new(SystemResolver),
            audit_dir: None,
            upstream_roots: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

impl NetworkOptions {
    /// A network that allows nothing until rules are added (also on the
    /// running sandbox, with
    /// [`Sandbox::set_network_policy`](crate::Sandbox::set_network_policy)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows what `policy` allows, replacing earlier rules.
    pub fn policy(mut self, policy: NetworkPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Whether the guest may reach the host itself (loopback, link-local,
    /// the host's own addresses): [`HostAccess::Denied`] unless told. See
    /// [`crate::network::host`].
    pub fn host_access(mut self, access: HostAccess) -> Self {
        self.host_access = access;
        self
    }

    /// Binds `secret` to its hosts: the guest sees a placeholder, and the
    /// host puts the value into HTTPS requests to those hosts.
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Resolves allowed names with `resolver` instead of the system's.
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// At most `limit` connections open at once; more are refused.
    pub fn max_connections(mut self, limit: usize) -> Self {
        self.max_connections = limit;
        self
    }

    /// Ends a connection after `idle` without a byte either way.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The most bytes of an HTTP request head the host reads.
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes;
        self
    }
}
