//! [`ServerConfig`]: what a server is made of besides its listeners.
//!
//! Every place a server reads or writes on disk is here: its data
//! directory (keys, sandbox records, named workspaces, snapshots, the
//! templates keys build), and the image and named-template stores its
//! creates name. The server resolves nothing against a process-wide
//! default of its own: two servers with different configurations share
//! nothing on disk. [`ServerConfig::default`] reads
//! the defaults once (the environment and the Airlock home).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock::{HostAccess, Sandbox, SandboxBuilder};

/// The environment variable naming the server's data directory.
pub const DATA_DIR_ENV: &str = "AIRLOCK_SERVER_DIR";

/// The data directory unless configured: `$AIRLOCK_SERVER_DIR`, else
/// `server/` in the Airlock home (which survives a reboot, as the saved
/// sandboxes beside it do).
pub fn default_data_dir() -> PathBuf {
    match std::env::var_os(DATA_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => airlock::artifacts::home().join("server"),
    }
}

/// Makes the builder every sandbox starts from, before a request's
/// options: where state directories and saved sandboxes go, the VMM user,
/// or (in tests) the process backend.
pub type BuilderFactory = Arc<dyn Fn() -> SandboxBuilder + Send + Sync>;

/// What a clean stop does with the sandboxes the server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnExit {
    /// Leave them running, for the next server to adopt (with their
    /// programs, files, labels, network policy and secrets).
    #[default]
    Leave,
    /// Save each to disk (ending its VM process); the next server lists
    /// them and restores each on its next call.
    PauseToDisk,
    /// Kill them.
    Kill,
}

impl std::str::FromStr for OnExit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "leave" => Ok(OnExit::Leave),
            "pause-to-disk" => Ok(OnExit::PauseToDisk),
            "kill" => Ok(OnExit::Kill),
            other => Err(format!(
                "{other:?} is not one of leave, pause-to-disk, kill"
            )),
        }
    }
}

/// A server's configuration.
#[derive(Clone)]
pub struct ServerConfig {
    /// The most sandboxes alive at once.
    pub max_sandboxes: usize,
    /// Keys, sandbox records and workspaces.
    pub data_dir: PathBuf,
    /// Where a create's image names are looked up (the image store
    /// `airlock-rootfs image build` fills; by default the Airlock home's,
    /// `images/`).
    pub images_dir: PathBuf,
    /// The server's own named templates: what every principal's create may
    /// name and `ListTemplates` lists, and where the owner's builds through
    /// the API go (the named templates `airlock template build` makes; by
    /// default `$AIRLOCK_NAMED_TEMPLATE_DIR`, else `named-templates/` in
    /// the Airlock home). A key's own are under the data directory.
    pub templates_dir: PathBuf,
    /// The builder every sandbox starts from.
    pub builder: BuilderFactory,
    /// Keep this many sandboxes of the default configuration (a create
    /// without machine options) started and frozen.
    pub pool: usize,
    /// What each pool member runs before it is frozen.
    pub pool_warm_up: airlock::WarmUp,
    /// Keep the pool of this snapshot of the owner's instead of the default
    /// configuration (the owner's creates that name it take a member).
    pub pool_snapshot: Option<String>,
    pub on_exit: OnExit,
    /// Calls a key may have in flight at once unless its quota says.
    pub max_calls_per_key: u32,
    /// A sandbox's lifetime when its create names none.
    pub default_timeout: Duration,
    /// Origins whose browser pages may call the TCP listener (gRPC-Web).
    pub cors_origins: Vec<String>,
    /// Whether the owner's sandboxes may reach the host itself (loopback,
    /// link-local, the host's own addresses) where their rules say. A
    /// key's never may, whatever this says.
    pub owner_host_access: HostAccess,
    /// The most bytes of one template build's context (its tar stream).
    pub max_context_bytes: u64,
    /// Template builds through the API at once (each runs one VM at a
    /// time, besides the sandboxes `max_sandboxes` bounds).
    pub max_template_builds: usize,
    /// Server-wide webhooks: every sandbox's events are posted to each
    /// (`https://`, or `http://` to a loopback address).
    pub webhooks: Vec<String>,
    /// Serve Prometheus metrics here (no key: `GET /metrics`); without it
    /// nothing is counted.
    pub metrics: Option<crate::metrics::MetricsEndpoint>,
    /// Keep the usage ledger (`<data dir>/usage.sqlite3`); on unless an
    /// embedder bills elsewhere (the metrics benchmark turns it off to
    /// measure what it costs).
    pub usage_ledger: bool,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("max_sandboxes", &self.max_sandboxes)
            .field("data_dir", &self.data_dir)
            .field("images_dir", &self.images_dir)
            .field("templates_dir", &self.templates_dir)
            .field("pool", &self.pool)
            .field("pool_warm_up", &self.pool_warm_up)
            .field("pool_snapshot", &self.pool_snapshot)
            .field("on_exit", &self.on_exit)
            .field("max_calls_per_key", &self.max_calls_per_key)
            .field("default_timeout", &self.default_timeout)
            .field("cors_origins", &self.cors_origins)
            .field("owner_host_access", &self.owner_host_access)
            .field("max_context_bytes", &self.max_context_bytes)
            .field("max_template_builds", &self.max_template_builds)
            .field("webhooks", &self.webhooks)
            .field("metrics", &self.metrics)
            .field("usage_ledger", &self.usage_ledger)
            .finish_non_exhaustive()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_sandboxes: 8,
            data_dir: default_data_dir(),
            images_dir: airlock::images::ImageStore::open_default()
                .root()
                .to_owned(),
            templates_dir: airlock::template::named::named_dir(),
            builder: Arc::new(Sandbox::builder),
            pool: 0,
            pool_warm_up: airlock::WarmUp::standard(),
            pool_snapshot: None,
            on_exit: OnExit::default(),
            max_calls_per_key: airlock_api::limits::DEFAULT_MAX_CALLS_PER_KEY,
            default_timeout: airlock::DEFAULT_MAX_LIFETIME,
            cors_origins: Vec::new(),
            owner_host_access: HostAccess::Denied,
            max_context_bytes: airlock_api::limits::DEFAULT_MAX_CONTEXT_BYTES,
            max_template_builds: 2,
            webhooks: Vec::new(),
            metrics: None,
            usage_ledger: true,
        }
    }
}
