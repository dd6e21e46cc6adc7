//! [`Registry`]: what every live session owns on the server (the
//! sandboxes it created, the change trackers it started), so that a
//! session's end, however it comes (the host hung up, the HTTP session was
//! deleted or timed out, the MCP server was told to stop), kills its
//! sandboxes and stops its trackers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use airlock_client::api::{KillSandboxRequest, StopTrackingRequest};
use airlock_client::Client;

/// How long the clean-up after the last session may take when the MCP
/// server stops.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// A sandbox a session created.
#[derive(Debug, Clone)]
struct Owned {
    client: Client,
    /// It outlives the session (until its own lifetime ends).
    keep: bool,
}

/// A change tracker a session started on a sandbox.
#[derive(Debug, Clone)]
struct Tracker {
    client: Client,
    id: String,
}

/// One session's holdings.
#[derive(Debug, Default)]
struct Holdings {
    /// By sandbox id.
    owned: HashMap<String, Owned>,
    /// By sandbox id.
    trackers: HashMap<String, Tracker>,
}

/// Every live session's holdings, by session number.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: Mutex<HashMap<u64, Holdings>>,
    next: AtomicU64,
    /// Clean-ups under way, waited for at shutdown.
    tasks: TaskTracker,
}

impl Registry {
    fn sessions(&self) -> MutexGuard<'_, HashMap<u64, Holdings>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A number for a new session.
    pub fn open(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Session `session` created sandbox `id` (through `client`).
    pub fn created(&self, session: u64, id: &str, client: &Client, keep: bool) {
        self.sessions().entry(session).or_default().owned.insert(
            id.to_owned(),
            Owned {
                client: client.clone(),
                keep,
            },
        );
    }

    /// Whether session `session` created sandbox `id`.
    pub fn owns(&self, session: u64, id: &str) -> bool {
        self.sessions()
            .get(&session)
            .is_some_and(|h| h.owned.contains_key(id))
    }

    /// Sandbox `id` was killed: nothing is left to clean up for it.
    pub fn ended(&self, session: u64, id: &str) {
        if let Some(holdings) = self.sessions().get_mut(&session) {
            holdings.owned.remove(id);
            holdings.trackers.remove(id);
        }
    }

    /// The tracker session `session` has on sandbox `id`.
    pub fn tracker(&self, session: u64, id: &str) -> Option<String> {
        self.sessions()
            .get(&session)
            .and_then(|h| h.trackers.get(id))
            .map(|t| t.id.clone())
    }

    /// Session `session` tracks sandbox `id` with `tracker` from now on.
    pub fn set_tracker(&self, session: u64, id: &str, client: &Client, tracker: String) {
        self.sessions().entry(session).or_default().trackers.insert(
            id.to_owned(),
            Tracker {
                client: client.clone(),
                id: tracker,
            },
        );
    }

    /// Ends session `session`: kills what it created (unless kept) and
    /// stops its trackers on the sandboxes that live on.
    pub async fn close(&self, session: u64) {
        let holdings = self.sessions().remove(&session);
        if let Some(holdings) = holdings {
            clean_up(holdings).await;
        }
    }

    /// Like [`Registry::close`], for a session dropped without being
    /// closed: the clean-up runs as a task of its own.
    pub fn close_later(&self, session: u64) {
        let Some(holdings) = self.sessions().remove(&session) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.tasks.spawn_on(clean_up(holdings), &runtime);
            }
            Err(_) => tracing::warn!(
                sandboxes = ?holdings.owned.keys().collect::<Vec<_>>(),
                "a session ended outside the runtime; its sandboxes end with their lifetime"
            ),
        }
    }

    /// Ends every session (the MCP server is stopping) and waits for the
    /// clean-ups under way.
    pub async fn shutdown(&self) {
        let all: Vec<Holdings> = self.sessions().drain().map(|(_, h)| h).collect();
        for holdings in all {
            self.tasks.spawn(clean_up(holdings));
        }
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_LIMIT, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("the sessions' sandboxes were not all killed in time");
        }
    }
}

async fn clean_up(holdings: Holdings) {
    let mut work = Vec::new();
    for (id, owned) in &holdings.owned {
        if owned.keep {
            continue;
        }
        let mut sandboxes = owned.client.sandboxes();
        let id = id.clone();
        work.push(tokio::spawn(async move {
            let request = KillSandboxRequest {
                sandbox_id: id.clone(),
            };
            match sandboxes.kill(request).await {
                Ok(_) => tracing::info!(sandbox = %id, "killed the session's sandbox"),
                Err(status) => {
                    tracing::warn!(sandbox = %id, error = %status.message(), "cannot kill the session's sandbox")
                }
            }
        }));
    }
    for (id, tracker) in &holdings.trackers {
        if holdings.owned.get(id).is_some_and(|o| !o.keep) {
            continue; // killed with its sandbox
        }
        let mut files = tracker.client.files();
        let request = StopTrackingRequest {
            sandbox_id: id.clone(),
            tracker_id: tracker.id.clone(),
        };
        work.push(tokio::spawn(async move {
            // The sandbox may have ended: nothing to stop then.
            let _ = files.stop_tracking(request).await;
        }));
    }
    for task in work {
        let _ = task.await;
    }
}
