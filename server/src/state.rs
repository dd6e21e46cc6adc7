//! [`State`]: what every call of the server shares: the library's manager,
//! the registry of owners and labels, the keys, the calls in flight per
//! principal, and the server's own tasks.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tonic::Status;

use airlock::images::ImageStore;
use airlock::{HostAccess, Sandbox, SandboxBuilder, SandboxState, Sandboxes};
use airlock_api::limits::MAX_OWNER_CALLS;
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::config::ServerConfig;
use crate::events::Events;
use crate::keys::{KeyStore, Quota};
use crate::machine::Machine;
use crate::principal::Principal;
use crate::registry::{Entry, Registry};
use crate::relays::Relays;
use crate::snapshots::SnapshotNames;
use crate::status::error_status;
use crate::templates::Templates;
use crate::trackers::Trackers;
use crate::validate;
use crate::workspaces::WorkspaceStore;

/// What the server's calls share.
#[derive(Debug)]
pub struct State {
    pub config: ServerConfig,
    pub sandboxes: Sandboxes,
    pub registry: Registry,
    pub keys: Arc<KeyStore>,
    /// What the server counts, when it serves metrics.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Where image names are looked up (the configuration's).
    pub images: ImageStore,
    /// The server's named templates and its keys' (see `templates`).
    pub templates: Templates,
    /// The machine the warm pool keeps, if there is a pool.
    pub pool: Option<Machine>,
    pub trackers: Trackers,
    pub relays: Relays,
    /// Held while a network policy is read, changed and written back.
    pub policy_changes: tokio::sync::Mutex<()>,
    /// The HTTP ingress, when the server serves one.
    pub ingress: Option<Arc<crate::ingress::Ingress>>,
    /// The keys' named workspaces.
    pub workspaces: WorkspaceStore,
    /// The keys' named snapshots.
    pub snapshots: SnapshotNames,
    /// The usage ledger (`serve` opens it).
    pub usage: Option<Arc<crate::usage::Ledger>>,
    /// The lifecycle events' bus (in memory until `serve` opens its log).
    pub events: Events,
    /// The webhooks (`serve` opens them).
    pub webhooks: Option<Arc<crate::webhooks::Webhooks>>,
    calls: Mutex<HashMap<Principal, Arc<Semaphore>>>,
    tasks: Mutex<JoinSet<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AsRef<Events> for State {
    fn as_ref(&self) -> &Events {
        &self.events
    }
}

impl State {
    pub fn new(
        config: ServerConfig,
        sandboxes: Sandboxes,
        registry: Registry,
        keys: Arc<KeyStore>,
        pool: Option<Machine>,
    ) -> Self {
        State {
            workspaces: WorkspaceStore::new(&config.data_dir),
            snapshots: SnapshotNames::new(&config.data_dir),
            images: ImageStore::at(config.images_dir.clone()),
            templates: Templates::new(
                config.templates_dir.clone(),
                &config.data_dir,
                config.max_template_builds,
            ),
            config,
            sandboxes,
            registry,
            keys,
            metrics: None,
            pool,
            trackers: Trackers::default(),
            relays: Relays::default(),
            policy_changes: tokio::sync::Mutex::new(()),
            ingress: None,
            usage: None,
            events: Events::in_memory(),
            webhooks: None,
            calls: Mutex::new(HashMap::new()),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// A builder as the server starts every sandbox from.
    pub fn builder(&self) -> SandboxBuilder {
        (self.config.builder)()
    }

    /// Whether `principal`'s sandboxes may reach the host itself: a key's
    /// never, the owner's as the server is configured.
    pub fn host_access(&self, principal: &Principal) -> HostAccess {
        match principal {
            Principal::Owner => self.config.owner_host_access,
            Principal::Key(_) => HostAccess::Denied,
        }
    }

    /// What the templates `principal` built take on disk, with their step
    /// cache and root images (counted in its storage quota with its
    /// snapshots); the owner's are the server's own and counted nowhere.
    pub fn stored_template_bytes(&self, principal: &Principal) -> u64 {
        self.templates.owned(principal).1
    }

    /// The quota of a key (the owner has none).
    pub fn quota(&self, principal: &Principal) -> Option<Quota> {
        let name = principal.key()?;
        Some(self.keys.get(name).map(|key| key.quota).unwrap_or_default())
    }

    /// A place for one more call of `principal`, held until the call (or
    /// its stream) ends; `RATE_LIMITED` when it has as many in flight as
    /// it may.
    pub fn admit(&self, principal: &Principal) -> Result<OwnedSemaphorePermit, Status> {
        let limit = match principal {
            Principal::Owner => MAX_OWNER_CALLS,
            Principal::Key(_) => match self.quota(principal) {
                Some(Quota {
                    max_concurrent_calls,
                    ..
                }) if max_concurrent_calls > 0 => max_concurrent_calls,
                _ => self.config.max_calls_per_key,
            },
        };
        let semaphore = Arc::clone(
            lock(&self.calls)
                .entry(principal.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(limit as usize))),
        );
        semaphore.try_acquire_owned().map_err(|_| {
            reason::status(
                ErrorReason::RateLimited,
                format!(
                    "{principal} has {limit} calls in flight, the most it may; retry when one ends"
                ),
            )
        })
    }

    /// The sandbox `id` for a call of `principal`, with its handle: one
    /// saved to disk whose handle is gone is restored now.
    /// `SANDBOX_NOT_FOUND` for an id that does not exist or is not the
    /// principal's.
    pub async fn sandbox(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<(Entry, Arc<Sandbox>), Status> {
        validate::sandbox_id("sandbox_id", id)?;
        let entry = self.registry.get(principal, id)?;
        if let Some(handle) = &entry.handle {
            return Ok((entry.clone(), Arc::clone(handle)));
        }
        let handle = self.restore(id).await?;
        self.registry.set_handle(id, Arc::clone(&handle));
        Ok((entry, handle))
    }

    /// The handle of the sandbox `id`, saved to disk and restored now (or
    /// restored by a call meanwhile), counted in the metrics as a create.
    async fn restore(&self, id: &str) -> Result<Arc<Sandbox>, Status> {
        let begun = std::time::Instant::now();
        let restored = self
            .sandboxes
            .get_or_restore(self.builder(), id)
            .await
            .map_err(|error| error_status(&error));
        if let Some(metrics) = &self.metrics {
            metrics.created(crate::metrics::Origin::Restored, &restored, begun.elapsed());
        }
        restored
    }

    /// The handle of a sandbox the ingress found (restoring one saved to
    /// disk whose handle is gone), refusing one that has ended.
    pub async fn ingress_handle(&self, entry: &Entry) -> Result<Arc<Sandbox>, Status> {
        let handle = match &entry.handle {
            Some(handle) => Arc::clone(handle),
            None => {
                let id = &entry.record.id;
                let handle = self.restore(id).await?;
                self.registry.set_handle(id, Arc::clone(&handle));
                handle
            }
        };
        if let SandboxState::Ended(reason) = handle.state() {
            return Err(reason::status(
                ErrorReason::SandboxEnded,
                format!("it has ended: {reason}"),
            ));
        }
        Ok(handle)
    }

    /// The sandbox's handle, refusing one that has ended.
    pub async fn live_sandbox(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<(Entry, Arc<Sandbox>), Status> {
        let (entry, handle) = self.sandbox(principal, id).await?;
        if let SandboxState::Ended(reason) = handle.state() {
            return Err(reason::status(
                ErrorReason::SandboxEnded,
                format!("sandbox {id} has ended: {reason}"),
            ));
        }
        Ok((entry, handle))
    }

    /// Spawns `task` where a stopping server ends it.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.tasks);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Ends every task the server spawned, and waits for them.
    pub async fn end_tasks(&self) {
        let mut running = std::mem::take(&mut *lock(&self.tasks));
        running.abort_all();
        while running.join_next().await.is_some() {}
    }
}
