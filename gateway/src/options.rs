//! What an embedder configures about a sandbox's network: the policy, the
//! secrets, how the host resolves names, and the bounds on what the guest
//! may open. (The roots the host trusts upstream besides the public ones
//! are the sandbox's own CA certificates:
//! the library's `SandboxBuilder::ca_cert`, passed in as
//! [`NetworkOptions::upstream_roots`].)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::host::HostAccess;
use super::policy::{NetRule, NetworkPolicy};
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
    /// the library's `Sandbox::set_network_policy`).
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
    /// [`crate::host`].
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

    /// The time the guest has to send a complete TLS ClientHello or HTTP
    /// request head once it sent its first byte.
    pub fn head_timeout(mut self, head: Duration) -> Self {
        self.head_timeout = head;
        self
    }

    /// Allows `rule` as well as the rules already given.
    pub fn allow(mut self, rule: NetRule) -> Self {
        self.policy.push(rule);
        self
    }

    /// Binds exactly `secrets`, replacing the ones given before.
    pub fn secrets(mut self, secrets: impl IntoIterator<Item = Secret>) -> Self {
        self.secrets = secrets.into_iter().collect();
        self
    }

    /// Keeps the audit log in `dir` as well as in memory (`None`: in
    /// memory only). The library sets it at start: an adoptable sandbox's
    /// state directory.
    pub fn audit_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.audit_dir = dir;
        self
    }

    /// The roots the host trusts upstream besides the public ones. The
    /// library sets them at start, from the sandbox's CA certificates.
    pub fn upstream_roots(mut self, roots: Vec<CertificateDer<'static>>) -> Self {
        self.upstream_roots = roots;
        self
    }

    /// The policy given.
    pub fn get_policy(&self) -> &NetworkPolicy {
        &self.policy
    }

    /// Whether the guest may reach the host itself.
    pub fn get_host_access(&self) -> HostAccess {
        self.host_access
    }

    /// The roots the host trusts upstream besides the public ones.
    pub fn get_upstream_roots(&self) -> &[CertificateDer<'static>] {
        &self.upstream_roots
    }

    /// The most connections open at once.
    pub fn get_max_connections(&self) -> usize {
        self.max_connections
    }

    /// How long a connection may go without a byte either way.
    pub fn get_idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// How long the guest has to send a request head once it began.
    pub fn get_head_timeout(&self) -> Duration {
        self.head_timeout
    }

    /// The most bytes of an HTTP request head the host reads.
    pub fn get_max_header_bytes(&self) -> usize {
        self.max_header_bytes
    }
}
