//! [`Sandboxes`]: many sandboxes on one host, started, tracked and stopped
//! together, with a ceiling on how many run at once.
//!
//! Starting is not serialized: each start boots its own VM while holding
//! only a slot (a semaphore permit), so N starts run concurrently and are
//! bounded by the host. A slot is given back when its VM ends, whatever
//! ends it (a stop, the lifetime ceiling, an idle stop, a crash).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::lifecycle::{SandboxState, SandboxUsage};
use crate::sandbox::{Sandbox, SandboxBuilder};

/// One line of [`Sandboxes::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    pub id: String,
    pub state: SandboxState,
    pub usage: SandboxUsage,
}

/// A set of sandboxes with a maximum size.
///
/// Dropping the manager drops its handles: a sandbox nobody else holds is
/// killed then.
#[derive(Debug)]
pub struct Sandboxes {
    max: usize,
    slots: Arc<Semaphore>,
    running: Mutex<BTreeMap<String, Arc<Sandbox>>>,
}

impl Sandboxes {
    /// A manager allowing at most `max` live sandboxes.
    pub fn new(max: usize) -> Self {
        Sandboxes {
            max,
            slots: Arc::new(Semaphore::new(max)),
            running: Mutex::new(BTreeMap::new()),
        }
    }

    /// The most sandboxes this manager runs at once.
    pub fn max(&self) -> usize {
        self.max
    }

    fn running(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Sandbox>>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a sandbox from `builder` and tracks it. Fails at once with
    /// [`Error::TooManySandboxes`] when the manager is full.
    pub async fn start(&self, builder: SandboxBuilder) -> Result<Arc<Sandbox>> {
        self.forget_ended();
        let slot = Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| Error::TooManySandboxes { max: self.max })?;
        let sandbox = Arc::new(builder.start_in_slot(Some(slot)).await?);
        self.running()
            .insert(sandbox.id().to_owned(), Arc::clone(&sandbox));
        Ok(sandbox)
    }

    /// The sandbox named `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Sandbox>> {
        self.running()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NoSuchSandbox { id: id.to_owned() })
    }

    /// Every tracked sandbox, by id; ended ones are listed (with why) until
    /// the next start, stop or [`forget_ended`](Sandboxes::forget_ended).
    pub fn list(&self) -> Vec<SandboxInfo> {
        self.running()
            .values()
            .map(|sandbox| SandboxInfo {
                id: sandbox.id().to_owned(),
                state: sandbox.state(),
                usage: sandbox.usage(),
            })
            .collect()
    }

    /// Stops tracking sandboxes that have ended.
    pub fn forget_ended(&self) {
        self.running()
            .retain(|_, sandbox| !matches!(sandbox.state(), SandboxState::Ended(_)));
    }

    /// Kills the sandbox named `id` and stops tracking it.
    pub fn kill(&self, id: &str) -> Result<()> {
        let sandbox = self
            .running()
            .remove(id)
            .ok_or_else(|| Error::NoSuchSandbox { id: id.to_owned() })?;
        sandbox.kill();
        Ok(())
    }

    /// Shuts the sandbox named `id` down gracefully (see
    /// [`Sandbox::shutdown`]) and stops tracking it. Other handles on it
    /// see it ended ([`EndReason::Stopped`](crate::EndReason::Stopped)).
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let sandbox = self
            .running()
            .remove(id)
            .ok_or_else(|| Error::NoSuchSandbox { id: id.to_owned() })?;
        sandbox.power_off(grace).await
    }

    /// Kills every sandbox and stops tracking them.
    pub fn kill_all(&self) {
        let all = std::mem::take(&mut *self.running());
        for sandbox in all.values() {
            sandbox.kill();
        }
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        self.kill_all();
    }
}
