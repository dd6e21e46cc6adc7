//! [`Sandboxes`]: many sandboxes on one host, started, tracked and stopped
//! together, with a ceiling on how many run at once, and optionally a warm
//! pool of frozen sandboxes to hand out.
//!
//! Starting is not serialized: each start boots its own VM while holding
//! only a slot (a semaphore permit), so N starts run concurrently and are
//! bounded by the host. A slot is given back when its VM ends, whatever
//! ends it (a stop, the lifetime ceiling, an idle stop, a crash).
//!
//! - this file: the manager, its slots, and the sandboxes it handed out.
//! - `pool`: the warm pool's state: its frozen members, the fills in
//!   flight, and when to top it up.
//! - `refill`: the background tasks that keep the pool full.
//! - `error`: [`PoolError`] and [`WarmUpError`].
//! - `warm_up`: what each member runs before it is frozen, and the checks
//!   that it left no trace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};
use crate::lifecycle::{SandboxState, SandboxUsage};
use crate::sandbox::{Sandbox, SandboxBuilder};

mod error;
mod pool;
mod refill;
mod warm_up;

pub use error::{PoolError, WarmUpError};
use pool::{Evicted, Pool};
pub use pool::{PoolConfig, PoolStatus};
pub use warm_up::{WarmUp, CHECKED_ROOTS as WARM_UP_CHECKED_ROOTS};

/// How long a thawed pool member's agent may take to answer before the
/// member is discarded.
const HANDOUT_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// One line of [`Sandboxes::list`] and [`PoolStatus::ready`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    pub id: String,
    pub state: SandboxState,
    pub usage: SandboxUsage,
}

impl SandboxInfo {
    fn of(sandbox: &Sandbox) -> Self {
        SandboxInfo {
            id: sandbox.id().to_owned(),
            state: sandbox.state(),
            usage: sandbox.usage(),
        }
    }
}

/// A set of sandboxes with a maximum size, and optionally a warm pool.
///
/// # The warm pool
///
/// With [`set_pool`](Sandboxes::set_pool) (or
/// [`configure_pool`](Sandboxes::configure_pool)), the manager keeps `size`
/// sandboxes of one configuration started, warmed up (see [`WarmUp`]: the
/// programs users run first have run once in each, so their code is
/// translated already under TCG, and nothing of them is left to see) and
/// frozen (paused: no guest CPU), and
/// [`start_pooled`](Sandboxes::start_pooled) hands one out: it thaws it,
/// pushes the host's clock to the guest, gives it fresh entropy, and tracks
/// it like any started sandbox. After each take the pool refills in the
/// background.
/// With [`SandboxBuilder::from_template`] each fill is a clone of the
/// configuration's template, so refills are cheap; any configuration can
/// be pooled (one with a workspace only once, since a workspace admits one
/// sandbox at a time).
///
/// Pool members count against the maximum: they hold slots. They only use
/// slots nobody else needs: a fill starts only in a free slot, and a
/// start ([`start`](Sandboxes::start) or
/// [`start_pooled`](Sandboxes::start_pooled)) that finds the manager full
/// evicts a pool member (a frozen one, else a fill in flight) instead of
/// failing. [`Error::TooManySandboxes`] means every slot holds a sandbox
/// that was handed out.
///
/// A pooled sandbox's life counts from its handout: its lifetime ceiling
/// ([`SandboxBuilder::max_lifetime`], [`Sandbox::set_max_lifetime`]), its
/// [`Sandbox::started_at`] and [`Sandbox::ends_at`], and the wall and
/// running times of [`Sandbox::usage`] start again when it is handed out,
/// so the time it
/// waited in the pool is neither billed nor taken from its life. Its guest
/// CPU time counts from its start (a clone's restore: tens of
/// milliseconds; its warm-up: about a second of TCG for the standard one),
/// and [`Sandbox::boot_timings`] describe that start. While
/// it waits, its ceiling counts from its start: a member that reaches it
/// ends in the pool, is never handed out, and is replaced, as is one that
/// ends any other way while frozen. A pool of an
/// [adoptable](SandboxBuilder::adoptable) configuration writes a member's
/// adoption record at its handout: members never handed out are not
/// adopted by a later process (`gc` collects them).
///
/// Dropping the manager drops its handles (a sandbox nobody else holds is
/// killed then), kills the pool's members and stops refilling.
#[derive(Debug)]
pub struct Sandboxes {
    inner: Arc<Inner>,
}

/// What the manager and its refill tasks share.
#[derive(Debug)]
struct Inner {
    max: usize,
    slots: Arc<Semaphore>,
    running: Mutex<BTreeMap<String, Arc<Sandbox>>>,
    pool: Mutex<Pool>,
    /// Wakes the pool's keeper.
    wake: Arc<Notify>,
    /// Serializes restores from disk and adoptions, so two calls naming
    /// one sandbox bring it back once.
    restoring: tokio::sync::Mutex<()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sandboxes {
    /// A manager allowing at most `max` live sandboxes.
    pub fn new(max: usize) -> Self {
        Sandboxes {
            inner: Arc::new(Inner {
                max,
                slots: Arc::new(Semaphore::new(max)),
                running: Mutex::new(BTreeMap::new()),
                pool: Mutex::new(Pool::default()),
                wake: Arc::new(Notify::new()),
                restoring: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A manager allowing at most `max` live sandboxes, with a pool of
    /// `size` frozen sandboxes of `builder`'s configuration (see
    /// [`set_pool`](Sandboxes::set_pool)).
    pub fn with_pool(max: usize, builder: SandboxBuilder, size: usize) -> Result<Self> {
        let manager = Sandboxes::new(max);
        manager.set_pool(builder, size)?;
        Ok(manager)
    }

    /// The most sandboxes this manager runs at once.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    fn running(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Sandbox>>> {
        lock(&self.inner.running)
    }

    /// Keeps `size` sandboxes of `builder`'s configuration started, warmed
    /// up with [`WarmUp::standard`] and frozen for
    /// [`start_pooled`](Sandboxes::start_pooled): see
    /// [`configure_pool`](Sandboxes::configure_pool).
    pub fn set_pool(&self, builder: SandboxBuilder, size: usize) -> Result<()> {
        self.configure_pool(PoolConfig::new(builder, size))
    }

    /// Keeps `config.size()` sandboxes of its configuration started, warmed
    /// up and frozen for [`start_pooled`](Sandboxes::start_pooled), filling
    /// in the background from now on (see [the pool](Sandboxes#the-warm-pool)).
    /// Replaces any previous pool, whose members are killed. Fails with
    /// [`PoolError::TooLarge`] when the size exceeds the maximum, and with
    /// [`PoolError::NoRuntime`] outside a tokio runtime.
    pub fn configure_pool(&self, config: PoolConfig) -> Result<()> {
        let size = config.size();
        if size > self.inner.max {
            return Err(PoolError::TooLarge {
                size,
                max: self.inner.max,
            }
            .into());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(PoolError::NoRuntime.into());
        }
        let drained = {
            let mut pool = self.inner.pool();
            let drained = pool.configure(config);
            if !pool.has_keeper() {
                pool.set_keeper(refill::spawn_keeper(&self.inner));
            }
            drained
        };
        drained.dispose();
        self.inner.wake.notify_one();
        tracing::info!(size, "pool set");
        Ok(())
    }

    /// Turns the pool off: kills its members and stops refilling.
    pub fn clear_pool(&self) {
        let drained = self.inner.pool().clear();
        drained.dispose();
    }

    /// The pool's size, its frozen members and its fills in flight.
    pub fn pool_status(&self) -> PoolStatus {
        self.inner.pool().status()
    }

    /// Starts a sandbox from `builder` and tracks it. Fails at once with
    /// [`Error::TooManySandboxes`] when every slot holds a sandbox handed
    /// out; a pool member gives up its slot instead.
    pub async fn start(&self, builder: SandboxBuilder) -> Result<Arc<Sandbox>> {
        self.forget_ended();
        let slot = self.inner.acquire_slot().await?;
        let sandbox = Arc::new(builder.start_in_slot(Some(slot)).await?);
        self.track(&sandbox);
        Ok(sandbox)
    }

    /// Hands out a sandbox from the pool: a frozen member, thawed with the
    /// host's clock pushed to the guest and its agent checked (a member
    /// that does not answer is discarded and the next one tried), or, when the pool has none ready,
    /// one started now from the pool's configuration. The pool refills in
    /// the background. Fails with [`PoolError::NoPool`] without a pool.
    #[tracing::instrument(skip_all)]
    pub async fn start_pooled(&self) -> Result<Arc<Sandbox>> {
        self.forget_ended();
        loop {
            let (member, ended) = {
                let mut pool = self.inner.pool();
                let ended = pool.prune_ended();
                if pool.builder().is_none() {
                    return Err(PoolError::NoPool.into());
                }
                (pool.take(), ended)
            };
            ended.dispose();
            self.inner.wake.notify_one();
            let Some(member) = member else { break };
            match self.hand_out(member).await {
                Ok(sandbox) => return Ok(sandbox),
                Err(error) => tracing::warn!(
                    error = %crate::error_chain(&error),
                    "a pooled sandbox could not be resumed; trying the next"
                ),
            }
        }
        let builder = self.inner.pool().builder().ok_or(PoolError::NoPool)?;
        tracing::info!("the pool has no sandbox ready; starting one");
        self.start(builder).await
    }

    /// Thaws a pool member, personalises it again (fresh entropy, the
    /// clock; its answer proves the agent answers, as a VM that died frozen
    /// may not be noticed yet), and tracks it, its clock started afresh.
    #[tracing::instrument(name = "hand_out", skip_all, fields(id = member.id()))]
    async fn hand_out(&self, member: Sandbox) -> Result<Arc<Sandbox>> {
        member.resume().await?;
        match tokio::time::timeout(HANDOUT_CHECK_TIMEOUT, member.personalize_again()).await {
            Ok(answer) => answer?,
            Err(_) => {
                return Err(Error::Protocol(format!(
                    "the agent did not answer within {HANDOUT_CHECK_TIMEOUT:?} of the thaw"
                )))
            }
        }
        member.restart_clock();
        tracing::info!(id = member.id(), "pooled sandbox handed out");
        let sandbox = Arc::new(member);
        self.track(&sandbox);
        Ok(sandbox)
    }

    fn track(&self, sandbox: &Arc<Sandbox>) {
        self.running()
            .insert(sandbox.id().to_owned(), Arc::clone(sandbox));
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
    /// The pool's members are not listed: see
    /// [`pool_status`](Sandboxes::pool_status).
    pub fn list(&self) -> Vec<SandboxInfo> {
        self.running()
            .values()
            .map(|s| SandboxInfo::of(s))
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

    /// Kills every sandbox, the pool's included, stops tracking them, and
    /// turns the pool off (set it again with
    /// [`set_pool`](Sandboxes::set_pool)). A sandbox saved to disk is left
    /// there, to be [`restore`](Sandboxes::restore)d later.
    pub fn kill_all(&self) {
        self.clear_pool();
        let all = std::mem::take(&mut *self.running());
        for sandbox in all.values() {
            sandbox.release();
        }
    }

    /// Restores the sandbox `id` saved to disk (see
    /// [`SandboxBuilder::restore`]) and tracks it; for a sandbox whose
    /// handle is gone, say after a restart of this process.
    pub async fn restore(&self, builder: SandboxBuilder, id: &str) -> Result<Arc<Sandbox>> {
        let _one_at_a_time = self.inner.restoring.lock().await;
        self.forget_ended();
        if self.running().contains_key(id) {
            return self.get(id);
        }
        let slot = self.inner.acquire_slot().await?;
        let sandbox = Arc::new(builder.restore_in_slot(id, Some(slot)).await?);
        self.track(&sandbox);
        Ok(sandbox)
    }

    /// The sandbox `id`: a tracked one, else one saved to disk in
    /// `builder`'s saved directory (by this process before its handle was
    /// dropped, or by another that ended), restored now with `builder`'s
    /// policies. [`Error::NoSuchSandbox`] when it is neither.
    pub async fn get_or_restore(&self, builder: SandboxBuilder, id: &str) -> Result<Arc<Sandbox>> {
        if let Ok(sandbox) = self.get(id) {
            return Ok(sandbox);
        }
        if !builder.saved_store().contains(id) {
            return Err(Error::NoSuchSandbox { id: id.to_owned() });
        }
        tracing::info!(%id, "restoring a sandbox saved to disk for a call");
        self.restore(builder, id).await
    }

    /// Every tracked sandbox (as [`list`](Sandboxes::list)) and every
    /// sandbox saved in `builder`'s saved directory whose handle is gone,
    /// listed [`SandboxState::OnDisk`] with the usage its record holds; by
    /// id.
    pub fn list_with_saved(&self, builder: &SandboxBuilder) -> Vec<SandboxInfo> {
        let mut all = self.list();
        let saved = builder.saved_store().list().unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot list the saved sandboxes");
            Vec::new()
        });
        for record in saved {
            if !all.iter().any(|info| info.id == record.id) {
                all.push(SandboxInfo {
                    id: record.id.clone(),
                    state: SandboxState::OnDisk,
                    usage: record.usage.into(),
                });
            }
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Ends the sandbox `id` for good: kills a tracked one (one saved to
    /// disk loses its files with it), or removes the files of one saved in
    /// `builder`'s saved directory whose handle is gone.
    /// [`Error::NoSuchSandbox`] when it is neither.
    pub fn remove(&self, builder: &SandboxBuilder, id: &str) -> Result<()> {
        match self.kill(id) {
            Err(Error::NoSuchSandbox { .. }) if builder.saved_store().contains(id) => {
                builder.saved_store().remove(id)?;
                tracing::info!(%id, "removed a sandbox saved to disk");
                Ok(())
            }
            other => other,
        }
    }

    /// Takes over the sandbox `id` whose owner died or detached it (see
    /// [`SandboxBuilder::adopt`]) and tracks it; returns the tracked one if
    /// this manager already holds it.
    pub async fn adopt(&self, builder: SandboxBuilder, id: &str) -> Result<Arc<Sandbox>> {
        let _one_at_a_time = self.inner.restoring.lock().await;
        self.forget_ended();
        if self.running().contains_key(id) {
            return self.get(id);
        }
        let slot = self.inner.acquire_slot().await?;
        let sandbox = Arc::new(builder.adopt_in_slot(id, Some(slot)).await?);
        self.track(&sandbox);
        Ok(sandbox)
    }

    /// Lets the sandbox named `id` go for a later process to adopt (see
    /// [`Sandbox::detach`]) and stops tracking it. One that cannot be
    /// detached (not adoptable, say) is refused and stays tracked.
    pub async fn detach(&self, id: &str) -> Result<()> {
        let sandbox = self.get(id)?;
        sandbox.detach_in_place().await?;
        self.running().remove(id);
        Ok(())
    }

    /// Lets every sandbox go for a later process to adopt (see
    /// [`Sandbox::detach`]), as a server does when it exits leaving its
    /// sandboxes running; the pool's members are killed and the pool turned
    /// off. Returns each tracked sandbox's id with how its detach went: one
    /// that could not be detached (not adoptable, say) is ended as
    /// [`kill_all`](Sandboxes::kill_all) ends it (one on disk stays there).
    /// Handles held elsewhere see their sandbox ended
    /// ([`EndReason::Detached`](crate::EndReason::Detached)); a workspace
    /// lock is released with the last of them.
    pub async fn detach_all(&self) -> Vec<(String, Result<()>)> {
        self.clear_pool();
        let all = std::mem::take(&mut *self.running());
        let mut detached = Vec::with_capacity(all.len());
        for (id, sandbox) in all {
            let result = sandbox.detach_in_place().await;
            if let Err(error) = &result {
                tracing::warn!(id, error = %crate::error_chain(error), "sandbox not detached; ending it");
                sandbox.release();
            }
            detached.push((id, result));
        }
        detached
    }

    /// Forks the sandbox `id` into `n` new ones (see [`Sandbox::fork`]),
    /// each holding a slot, and tracks them.
    pub async fn fork(&self, id: &str, n: usize) -> Result<Vec<Arc<Sandbox>>> {
        self.forget_ended();
        let parent = self.get(id)?;
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            slots.push(self.inner.acquire_slot().await?);
        }
        let children = parent.fork(n).await?;
        Ok(children
            .into_iter()
            .zip(slots)
            .map(|(child, slot)| {
                child.hold_slot(slot);
                let child = Arc::new(child);
                self.track(&child);
                child
            })
            .collect())
    }
}

impl Inner {
    fn pool(&self) -> MutexGuard<'_, Pool> {
        lock(&self.pool)
    }

    /// A slot for a start: a free one, else one a pool member gives up.
    async fn acquire_slot(&self) -> Result<OwnedSemaphorePermit> {
        // Each round frees a slot; the keeper may take it for a fill in
        // between, so the rounds are bounded.
        for _ in 0..=(self.max + pool::PARALLEL_FILLS) {
            if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
                return Ok(slot);
            }
            let evicted = self.pool().evict();
            match evicted {
                Some(Evicted::Ready(member)) => {
                    tracing::info!(id = member.id(), "pooled sandbox evicted for a start");
                    drop(member);
                }
                Some(Evicted::Filling(task)) => {
                    tracing::info!("pool fill given up for a start");
                    task.abort();
                    // Its slot is free once the task is gone.
                    let _ = task.await;
                }
                None => break,
            }
        }
        Err(Error::TooManySandboxes { max: self.max })
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn the_manager_is_send_and_sync() {
        assert_send_sync::<Sandboxes>();
        assert_send_sync::<PoolStatus>();
    }

    #[test]
    fn a_pool_needs_a_runtime() {
        let manager = Sandboxes::new(2);
        let error = manager.set_pool(SandboxBuilder::default(), 1).unwrap_err();
        assert!(
            matches!(error, Error::Pool(PoolError::NoRuntime)),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_pool_larger_than_the_manager_is_refused() {
        let manager = Sandboxes::new(2);
        let error = manager.set_pool(SandboxBuilder::default(), 3).unwrap_err();
        assert!(
            matches!(error, Error::Pool(PoolError::TooLarge { size: 3, max: 2 })),
            "{error}"
        );
        assert_eq!(manager.pool_status(), PoolStatus::default());
    }

    #[tokio::test]
    async fn start_pooled_without_a_pool_says_how_to_set_one() {
        let manager = Sandboxes::new(2);
        let error = manager.start_pooled().await.unwrap_err();
        assert!(error.to_string().contains("set_pool"), "{error}");
    }

    #[tokio::test]
    async fn a_pool_that_cannot_fill_reports_why_and_backs_off() {
        let builder = SandboxBuilder::default().kernel("/nonexistent/vmlinuz");
        let manager = Sandboxes::with_pool(2, builder, 1).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let status = loop {
            let status = manager.pool_status();
            if status.last_error.is_some() || std::time::Instant::now() > deadline {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let error = status.last_error.clone().unwrap_or_default();
        assert!(error.contains("/nonexistent/vmlinuz"), "{status:?}");
        assert_eq!((status.size, status.ready.len()), (1, 0), "{status:?}");
        // Backing off, nothing holds a slot.
        assert_eq!(manager.inner.slots.available_permits(), 2);
        // A start from the pool tries the configuration itself.
        let error = manager.start_pooled().await.unwrap_err();
        assert!(matches!(error, Error::MissingArtifact { .. }), "{error}");
    }
}
