//! [`Session`]: one MCP session (a stdio connection, or an HTTP session):
//! how it reaches the server, the sandbox it makes for itself on first
//! need and keeps (its lifetime pushed on while it is used), the change
//! trackers behind `changed_files`, and the names of its log files. Its
//! end (or its drop) kills what it created through the [`Registry`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::ErrorCode;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use airlock_client::api::{
    CreateSandboxRequest, SandboxInfo, SetTimeoutRequest, TrackChangesRequest,
};
use airlock_client::{Client, ClientError};

use crate::access::{Caller, Connector, KeyId};
use crate::idle::{Busy, IdleWatch};
use crate::outcome::Stop;
use crate::registry::Registry;

/// Where a session's log files go in a sandbox: outside the directories
/// `changed_files` tracks.
pub const LOG_DIR: &str = "/var/log/airlock-mcp";
/// The label every sandbox a session creates carries, with the session's
/// tag.
pub const SESSION_LABEL: &str = "mcp/session";
/// How often a call on the session's sandbox pushes its end back.
const RENEW_EVERY: Duration = Duration::from_secs(60);

/// What the sandbox a session makes for itself is like (the `airlock mcp`
/// options).
#[derive(Debug, Clone)]
pub struct SessionSandbox {
    /// A root image by name (`None`: the server's default, with Python).
    pub image: Option<String>,
    /// Guest memory in MiB (`None`: the server's default).
    pub memory_mib: Option<u32>,
    /// How long it lives after the session's last call on it (the server
    /// kills it then; the session's end kills it sooner).
    pub lifetime: Duration,
    /// Network destinations it may reach (none: no network).
    pub allow_net: Vec<String>,
}

impl Default for SessionSandbox {
    fn default() -> Self {
        SessionSandbox {
            image: None,
            memory_mib: None,
            lifetime: Duration::from_secs(3600),
            allow_net: Vec::new(),
        }
    }
}

/// How a session reaches the server.
#[derive(Debug)]
pub enum Access {
    /// One client for the whole session (stdio), connected on first need.
    Fixed(Box<Fixed>),
    /// Each request's own caller (HTTP); the session belongs to the key
    /// that opened it, and ends when idle.
    PerRequest {
        owner: OnceLock<KeyId>,
        idle: Arc<IdleWatch>,
    },
}

/// A stdio session's way to the server.
#[derive(Debug)]
pub struct Fixed {
    connector: Connector,
    client: tokio::sync::OnceCell<Client>,
}

impl Access {
    pub fn fixed(connector: Connector) -> Access {
        Access::Fixed(Box::new(Fixed {
            connector,
            client: tokio::sync::OnceCell::new(),
        }))
    }

    pub fn per_request(idle: Arc<IdleWatch>) -> Access {
        Access::PerRequest {
            owner: OnceLock::new(),
            idle,
        }
    }
}

/// The sandbox a call acts on.
#[derive(Debug, Clone)]
pub struct Target {
    pub client: Client,
    pub id: String,
    /// It is the session's own sandbox (the call named none).
    pub is_default: bool,
}

/// The session's own sandbox.
#[derive(Debug)]
struct Own {
    id: String,
    renewed: Instant,
}

/// One MCP session's state.
#[derive(Debug)]
pub struct Session {
    registry: Arc<Registry>,
    settings: Arc<SessionSandbox>,
    number: u64,
    /// A random name for this session: its label value and log names.
    tag: String,
    access: Access,
    own: tokio::sync::Mutex<Option<Own>>,
    next_log: AtomicU64,
}

impl Session {
    pub fn new(registry: Arc<Registry>, settings: Arc<SessionSandbox>, access: Access) -> Session {
        let number = registry.open();
        Session {
            registry,
            settings,
            number,
            tag: random_tag(),
            access,
            own: tokio::sync::Mutex::new(None),
            next_log: AtomicU64::new(1),
        }
    }

    /// Checks an HTTP request's caller (initialize's too): the first key
    /// seen owns the session and no other key may use it.
    pub fn admit(&self, context: &RequestContext<RoleServer>) -> Result<(), Stop> {
        match &self.access {
            Access::PerRequest { owner, .. } => caller(owner, context).map(drop),
            Access::Fixed(_) => Ok(()),
        }
    }

    /// A tool call begins: over HTTP, the session is not idle until it
    /// ends.
    pub fn busy(&self, context: &RequestContext<RoleServer>) -> Busy {
        match &self.access {
            Access::PerRequest { idle, .. } => idle.begin(context),
            Access::Fixed(_) => Busy::none(),
        }
    }

    /// A client of the server for this call.
    pub async fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, Stop> {
        match &self.access {
            Access::Fixed(fixed) => fixed
                .client
                .get_or_try_init(|| fixed.connector.connect())
                .await
                .cloned()
                .map_err(|e| Stop::call("cannot reach the Airlock server", e)),
            Access::PerRequest { owner, .. } => caller(owner, context).map(|c| c.client),
        }
    }

    /// The sandbox a call acts on: the one it names, or the session's own
    /// (created now if there is none yet).
    pub async fn target(
        &self,
        context: &RequestContext<RoleServer>,
        named: Option<String>,
    ) -> Result<Target, Stop> {
        let client = self.client(context).await?;
        if let Some(id) = named.filter(|id| !id.trim().is_empty()) {
            return Ok(Target {
                client,
                id: id.trim().to_owned(),
                is_default: false,
            });
        }
        let mut own = self.own.lock().await;
        match own.as_mut() {
            Some(own) => {
                if own.renewed.elapsed() >= RENEW_EVERY {
                    self.renew(&client, &own.id).await;
                    own.renewed = Instant::now();
                }
                Ok(Target {
                    client,
                    id: own.id.clone(),
                    is_default: true,
                })
            }
            None => {
                let request = self.session_request();
                let info = self
                    .create(&client, request, false)
                    .await
                    .map_err(|e| Stop::call("cannot start this session's sandbox", e))?;
                tracing::info!(sandbox = %info.sandbox_id, session = %self.tag, "made the session's sandbox");
                *own = Some(Own {
                    id: info.sandbox_id.clone(),
                    renewed: Instant::now(),
                });
                Ok(Target {
                    client,
                    id: info.sandbox_id,
                    is_default: true,
                })
            }
        }
    }

    /// The session's own sandbox, if it has one yet.
    pub async fn own_sandbox(&self) -> Option<String> {
        self.own.lock().await.as_ref().map(|own| own.id.clone())
    }

    /// From now on, calls that name no sandbox use `id`.
    pub async fn adopt(&self, id: &str) {
        *self.own.lock().await = Some(Own {
            id: id.to_owned(),
            renewed: Instant::now(),
        });
    }

    /// The request for the session's own sandbox.
    fn session_request(&self) -> CreateSandboxRequest {
        let settings = &self.settings;
        CreateSandboxRequest {
            image: settings.image.clone().unwrap_or_default(),
            memory_mib: settings.memory_mib.unwrap_or(0),
            timeout_secs: Some(settings.lifetime.as_secs().max(1)),
            allow_net: settings.allow_net.clone(),
            ..Default::default()
        }
    }

    /// Creates a sandbox labelled as this session's; unless `keep`, the
    /// session's end kills it.
    pub async fn create(
        &self,
        client: &Client,
        mut request: CreateSandboxRequest,
        keep: bool,
    ) -> Result<SandboxInfo, ClientError> {
        request
            .metadata
            .insert(SESSION_LABEL.to_owned(), self.tag.clone());
        let info = client.sandboxes().create(request).await?.into_inner();
        self.registry
            .created(self.number, &info.sandbox_id, client, keep);
        Ok(info)
    }

    /// Pushes the end of the session's sandbox back by its lifetime.
    async fn renew(&self, client: &Client, id: &str) {
        let request = SetTimeoutRequest {
            sandbox_id: id.to_owned(),
            timeout_secs: self.settings.lifetime.as_secs().max(1),
        };
        if let Err(status) = client.sandboxes().set_timeout(request).await {
            tracing::debug!(sandbox = %id, error = %status.message(), "cannot renew the session's sandbox");
        }
    }

    /// Whether this session created sandbox `id`.
    pub fn created(&self, id: &str) -> bool {
        self.registry.owns(self.number, id)
    }

    /// Sandbox `id` was killed (by a tool): nothing is left to clean up,
    /// and if it was the session's own, the next call makes another.
    pub async fn ended(&self, id: &str) {
        self.registry.ended(self.number, id);
        let mut own = self.own.lock().await;
        if own.as_ref().is_some_and(|own| own.id == id) {
            *own = None;
        }
    }

    /// A failed call on `target`: when the session's own sandbox is gone,
    /// the session forgets it (the next call starts a new one) and says
    /// so.
    pub async fn failed(&self, target: &Target, what: &str, error: ClientError) -> Stop {
        use airlock_client::api::ErrorReason;
        let gone = matches!(
            error.reason(),
            Some(ErrorReason::SandboxEnded | ErrorReason::SandboxNotFound)
        );
        if target.is_default && gone {
            self.ended(&target.id).await;
            let message = error.to_string();
            return Stop::Failed(format!(
                "{what}: this session's sandbox {} has ended ({message}); the next call starts a \
                 new one, without the old one's files, variables or programs",
                target.id
            ));
        }
        Stop::call(what, error)
    }

    /// Makes sure `changed_files` can say what the coming calls change: a
    /// change tracker on the sandbox from before the first of them.
    pub async fn track(&self, target: &Target) {
        if self.registry.tracker(self.number, &target.id).is_some() {
            return;
        }
        if let Err(error) = self.start_tracker(target).await {
            tracing::debug!(sandbox = %target.id, %error, "cannot track changes");
        }
    }

    /// Starts a new tracker on `target` (replacing the session's old one,
    /// if any) and returns the old one's id.
    pub async fn start_tracker(&self, target: &Target) -> Result<Option<String>, ClientError> {
        let request = TrackChangesRequest {
            sandbox_id: target.id.clone(),
            roots: Vec::new(),
        };
        let tracker = target
            .client
            .files()
            .track_changes(request)
            .await?
            .into_inner()
            .tracker_id;
        let old = self.registry.tracker(self.number, &target.id);
        self.registry
            .set_tracker(self.number, &target.id, &target.client, tracker);
        Ok(old)
    }

    /// The session's tracker on sandbox `id`.
    pub fn tracker(&self, id: &str) -> Option<String> {
        self.registry.tracker(self.number, id)
    }

    /// A new log file's path in a sandbox: `LOG_DIR/TAG-N.SUFFIX`.
    pub fn log_path(&self, suffix: &str) -> String {
        let n = self.next_log.fetch_add(1, Ordering::Relaxed);
        format!("{LOG_DIR}/{}-{n}.{suffix}", self.tag)
    }

    /// A name for a background program (its tag in the guest).
    pub fn program_tag(&self) -> String {
        let n = self.next_log.fetch_add(1, Ordering::Relaxed);
        format!("mcp-{}-{n}", self.tag)
    }

    /// Ends the session: kills what it created (unless kept) and stops
    /// its trackers.
    pub async fn close(&self) {
        self.registry.close(self.number).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.registry.close_later(self.number);
    }
}

/// The caller of an HTTP request, as the gate admitted them, if their key
/// owns the session (the first key seen does).
fn caller(owner: &OnceLock<KeyId>, context: &RequestContext<RoleServer>) -> Result<Caller, Stop> {
    let caller = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            Stop::Protocol(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "the request reached the tools without passing the API key check",
                None,
            ))
        })?;
    if *owner.get_or_init(|| caller.key) != caller.key {
        return Err(Stop::Protocol(ErrorData::invalid_request(
            "this MCP session was opened with another API key: open a session of your own",
            None,
        )));
    }
    Ok(caller)
}

/// Eight hex digits from the host's one random source, `airlock-random`
/// (the clock's, if that cannot be read: a tag names a session in labels
/// and log names, and is no secret).
fn random_tag() -> String {
    match airlock_random::hex::<4>() {
        Ok(tag) => tag,
        Err(error) => {
            tracing::warn!(error = %airlock_report::chain(&error), "no random session tag; using the clock's");
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            nanos
                .to_le_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }
    }
}
