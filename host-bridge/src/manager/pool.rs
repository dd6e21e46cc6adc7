//! The warm pool's state: its configuration, the frozen members ready to
//! hand out, the fills in flight, and the rules for topping it up and
//! backing off after failures. Everything here runs under the manager's
//! pool lock and never waits; the tasks that fill it are in `refill`.
//!
//! Nothing here drops a [`Sandbox`] or ends a fill: what leaves the pool is
//! returned as a [`Drained`] for the caller to dispose of after the lock is
//! released (dropping a sandbox kills its VM and removes its directory).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::warm_up::WarmUp;
use super::SandboxInfo;
use crate::lifecycle::SandboxState;
use crate::sandbox::{Sandbox, SandboxBuilder};

/// How many fills run at once: each is a VM start, and a pool's purpose
/// is to leave the host's CPUs to the sandboxes in use.
pub(super) const PARALLEL_FILLS: usize = 2;
/// The wait after a first failed fill; it doubles with each failure in a
/// row, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Told how long the pool took to be full again after a handout (see
/// [`PoolConfig::on_refilled`]).
type RefillHook = Arc<dyn Fn(Duration) + Send + Sync>;

/// A pool's configuration, for
/// [`Sandboxes::configure_pool`](crate::Sandboxes::configure_pool): what
/// its members start from, how many it keeps, and what each runs before
/// it is frozen.
#[derive(Clone)]
pub struct PoolConfig {
    builder: SandboxBuilder,
    size: usize,
    warm_up: WarmUp,
    on_refilled: Option<RefillHook>,
}

impl fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolConfig")
            .field("builder", &self.builder)
            .field("size", &self.size)
            .field("warm_up", &self.warm_up)
            .field("on_refilled", &self.on_refilled.is_some())
            .finish()
    }
}

impl PoolConfig {
    /// `size` members of `builder`'s configuration, each warmed up with
    /// [`WarmUp::standard`] before it is frozen.
    pub fn new(builder: SandboxBuilder, size: usize) -> Self {
        PoolConfig {
            builder,
            size,
            warm_up: WarmUp::standard(),
            on_refilled: None,
        }
    }

    /// What each member runs after its start and before it is frozen (see
    /// [`WarmUp`]); a member whose warm-up fails, or leaves a trace, is
    /// discarded and the failure reported in
    /// [`PoolStatus::last_error`].
    pub fn warm_up(mut self, warm_up: WarmUp) -> Self {
        self.warm_up = warm_up;
        self
    }

    /// Calls `hook` each time the pool is full again after a handout, with
    /// the time from the first handout that left it short until its last
    /// member was frozen (a server's refill-time metric). It runs on the
    /// fill's task, outside the pool's lock: keep it short.
    pub fn on_refilled(mut self, hook: impl Fn(Duration) + Send + Sync + 'static) -> Self {
        self.on_refilled = Some(Arc::new(hook));
        self
    }

    /// How many frozen members the pool keeps.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// What a pool holds, from [`Sandboxes::pool_status`](crate::Sandboxes::pool_status).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStatus {
    /// How many frozen members the pool keeps (0 without a pool).
    pub size: usize,
    /// The frozen members ready to hand out, in the order they go.
    pub ready: Vec<SandboxInfo>,
    /// Members being started.
    pub filling: usize,
    /// Why the last fill failed, until one succeeds; fills wait a little
    /// longer after each failure in a row (1 s, doubling up to 30 s).
    pub last_error: Option<String>,
}

/// What left the pool, to dispose of outside its lock.
#[derive(Default)]
#[must_use = "members must be dropped and fills ended outside the lock"]
pub(super) struct Drained {
    pub members: Vec<Sandbox>,
    pub fills: Vec<JoinHandle<()>>,
    pub keeper: Option<JoinHandle<()>>,
    /// The pool is full again after a handout: the hook to tell, and how
    /// long it took.
    pub refilled: Option<(RefillHook, Duration)>,
}

impl fmt::Debug for Drained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drained")
            .field("members", &self.members)
            .field("fills", &self.fills)
            .field("keeper", &self.keeper)
            .field("refilled", &self.refilled.as_ref().map(|(_, took)| took))
            .finish()
    }
}

impl Drained {
    /// Ends the fills and the keeper, kills the members, and tells the
    /// refill hook.
    pub fn dispose(self) {
        if let Some((hook, took)) = &self.refilled {
            hook(*took);
        }
        for fill in &self.fills {
            fill.abort();
        }
        if let Some(keeper) = &self.keeper {
            keeper.abort();
        }
        for member in &self.members {
            tracing::debug!(id = member.id(), "pooled sandbox discarded");
        }
        drop(self.members);
    }
}

/// A member taken out to make room for a start.
#[derive(Debug)]
pub(super) enum Evicted {
    Ready(Box<Sandbox>),
    Filling(JoinHandle<()>),
}

/// A fill to start: its number, the pool generation it belongs to, the
/// configuration and the warm-up.
#[derive(Debug)]
pub(super) struct FillOrder {
    pub id: u64,
    pub generation: u64,
    pub builder: SandboxBuilder,
    pub warm_up: WarmUp,
}

/// The pool, under the manager's lock.
#[derive(Debug, Default)]
pub(super) struct Pool {
    config: Option<PoolConfig>,
    /// Bumped on every change of configuration, so a fill of an old one
    /// is discarded when it finishes.
    generation: u64,
    ready: VecDeque<Sandbox>,
    fills: BTreeMap<u64, JoinHandle<()>>,
    next_fill: u64,
    /// Failed fills in a row, when the next may start, and the last error.
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
    keeper: Option<JoinHandle<()>>,
    /// Since the first handout that left the pool short (cleared when it
    /// is full again).
    short_since: Option<Instant>,
}

impl Pool {
    /// Sets the configuration; the members and fills of the previous one
    /// are drained.
    pub fn configure(&mut self, config: PoolConfig) -> Drained {
        let keeper = self.keeper.take();
        let mut drained = self.clear();
        // The keeper serves every configuration.
        self.keeper = keeper;
        drained.keeper = None;
        self.config = Some(config);
        drained
    }

    /// Turns the pool off and drains it, the keeper included.
    pub fn clear(&mut self) -> Drained {
        self.config = None;
        self.generation += 1;
        self.failures = 0;
        self.retry_at = None;
        self.last_error = None;
        self.short_since = None;
        Drained {
            members: self.ready.drain(..).collect(),
            fills: std::mem::take(&mut self.fills).into_values().collect(),
            keeper: self.keeper.take(),
            refilled: None,
        }
    }

    pub fn has_keeper(&self) -> bool {
        self.keeper.is_some()
    }

    pub fn set_keeper(&mut self, keeper: JoinHandle<()>) {
        self.keeper = Some(keeper);
    }

    /// The configuration members start from.
    pub fn builder(&self) -> Option<SandboxBuilder> {
        self.config.as_ref().map(|config| config.builder.clone())
    }

    /// Takes out the members that ended while frozen (killed, or at their
    /// lifetime ceiling).
    pub fn prune_ended(&mut self) -> Drained {
        let mut ended = Vec::new();
        for member in std::mem::take(&mut self.ready) {
            if matches!(member.state(), SandboxState::Ended(_)) {
                ended.push(member);
            } else {
                self.ready.push_back(member);
            }
        }
        Drained {
            members: ended,
            ..Drained::default()
        }
    }

    /// The next member to hand out: the oldest. The pool is short from
    /// now until a fill makes it full again.
    pub fn take(&mut self) -> Option<Sandbox> {
        let member = self.ready.pop_front()?;
        self.short_since.get_or_insert_with(Instant::now);
        Some(member)
    }

    /// A member to give up for a start when the manager is full: a ready
    /// one first (the oldest), else the fill started last.
    pub fn evict(&mut self) -> Option<Evicted> {
        if let Some(member) = self.ready.pop_front() {
            return Some(Evicted::Ready(Box::new(member)));
        }
        let last = *self.fills.keys().next_back()?;
        self.fills.remove(&last).map(Evicted::Filling)
    }

    /// How many fills to start now, given `free_slots` in the manager.
    pub fn fills_wanted(&self, free_slots: usize, now: Instant) -> usize {
        let Some(config) = &self.config else { return 0 };
        if self.retry_at.is_some_and(|at| now < at) {
            return 0;
        }
        fills_wanted(config.size, self.ready.len(), self.fills.len(), free_slots)
    }

    /// Numbers a new fill of the current configuration.
    pub fn order_fill(&mut self) -> Option<FillOrder> {
        let config = self.config.as_ref()?;
        let (builder, warm_up) = (config.builder.clone(), config.warm_up.clone());
        self.next_fill += 1;
        Some(FillOrder {
            id: self.next_fill,
            generation: self.generation,
            builder,
            warm_up,
        })
    }

    /// Records a fill's task (under the same lock as its spawn, so it is
    /// recorded before it can finish).
    pub fn fill_started(&mut self, id: u64, task: JoinHandle<()>) {
        self.fills.insert(id, task);
    }

    /// A fill ended: its member joins the pool, or its error is recorded.
    /// A member of an old configuration, or of a fill that was given up,
    /// is returned for disposal.
    pub fn fill_finished(
        &mut self,
        id: u64,
        generation: u64,
        result: crate::Result<Sandbox>,
        now: Instant,
    ) -> Drained {
        let ours = self.fills.remove(&id).is_some() && generation == self.generation;
        match result {
            Ok(member) if ours && !matches!(member.state(), SandboxState::Ended(_)) => {
                tracing::debug!(id = member.id(), "pooled sandbox ready");
                self.failures = 0;
                self.retry_at = None;
                self.last_error = None;
                self.ready.push_back(member);
                let full = self
                    .config
                    .as_ref()
                    .is_some_and(|config| self.ready.len() >= config.size);
                let hook = self.config.as_ref().and_then(|c| c.on_refilled.clone());
                match self.short_since.take_if(|_| full) {
                    Some(since) => Drained {
                        refilled: hook.map(|hook| (hook, now.saturating_duration_since(since))),
                        ..Drained::default()
                    },
                    None => Drained::default(),
                }
            }
            Ok(member) => Drained {
                members: vec![member],
                ..Drained::default()
            },
            Err(error) if ours => {
                let reason = crate::error_chain(&error);
                self.failures = self.failures.saturating_add(1);
                let wait = backoff(self.failures);
                tracing::warn!(%reason, retry_in = ?wait, "a pool fill failed");
                self.retry_at = Some(now + wait);
                self.last_error = Some(reason);
                Drained::default()
            }
            Err(_) => Drained::default(),
        }
    }

    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            size: self.config.as_ref().map_or(0, |config| config.size),
            ready: self.ready.iter().map(SandboxInfo::of).collect(),
            filling: self.fills.len(),
            last_error: self.last_error.clone(),
        }
    }
}

/// Fills to start: what the pool lacks, within the fills allowed at once
/// and the manager's free slots.
fn fills_wanted(size: usize, ready: usize, filling: usize, free_slots: usize) -> usize {
    size.saturating_sub(ready + filling)
        .min(PARALLEL_FILLS.saturating_sub(filling))
        .min(free_slots)
}

/// The wait before the next fill after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_top_up_what_the_pool_lacks() {
        assert_eq!(fills_wanted(2, 0, 0, 8), 2);
        assert_eq!(fills_wanted(2, 1, 0, 8), 1);
        assert_eq!(fills_wanted(2, 1, 1, 8), 0);
        assert_eq!(fills_wanted(2, 2, 0, 8), 0);
        assert_eq!(fills_wanted(0, 0, 0, 8), 0);
    }

    #[test]
    fn fills_never_exceed_the_free_slots() {
        assert_eq!(fills_wanted(2, 0, 0, 1), 1);
        assert_eq!(fills_wanted(2, 0, 0, 0), 0);
    }

    #[test]
    fn fills_run_a_few_at_a_time() {
        assert_eq!(fills_wanted(8, 0, 0, 8), PARALLEL_FILLS);
        assert_eq!(fills_wanted(8, 0, PARALLEL_FILLS, 8), 0);
        assert_eq!(fills_wanted(8, 5, 1, 8), PARALLEL_FILLS - 1);
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(6), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn an_empty_pool_wants_nothing_and_hands_out_nothing() {
        let mut pool = Pool::default();
        assert_eq!(pool.fills_wanted(8, Instant::now()), 0);
        assert!(pool.take().is_none());
        assert!(pool.evict().is_none());
        assert!(pool.order_fill().is_none());
        assert_eq!(pool.status(), PoolStatus::default());
    }

    #[tokio::test]
    async fn a_failed_fill_backs_off_and_is_reported() {
        let mut pool = Pool::default();
        let _ = pool.configure(PoolConfig::new(SandboxBuilder::default(), 2));
        let now = Instant::now();
        assert_eq!(pool.fills_wanted(8, now), 2);
        let order = pool.order_fill().unwrap();
        pool.fill_started(order.id, tokio::spawn(async {}));
        assert_eq!(pool.status().filling, 1);
        let failed = Err(crate::Error::Protocol("no kernel".into()));
        let drained = pool.fill_finished(order.id, order.generation, failed, now);
        assert!(drained.members.is_empty());
        let status = pool.status();
        assert_eq!(status.filling, 0);
        assert!(
            status.last_error.as_deref().unwrap().contains("no kernel"),
            "{status:?}"
        );
        assert_eq!(pool.fills_wanted(8, now), 0, "backing off");
        assert_eq!(pool.fills_wanted(8, now + FIRST_BACKOFF), 2);
    }

    #[tokio::test]
    async fn a_new_configuration_discards_the_old_ones_fills() {
        let mut pool = Pool::default();
        let _ = pool.configure(PoolConfig::new(SandboxBuilder::default(), 1));
        let old = pool.order_fill().unwrap();
        pool.fill_started(old.id, tokio::spawn(async {}));
        let drained =
            pool.configure(PoolConfig::new(SandboxBuilder::default(), 1).warm_up(WarmUp::none()));
        assert_eq!(drained.fills.len(), 1);
        assert!(drained.members.is_empty() && drained.keeper.is_none());
        let failed = Err(crate::Error::Protocol("stale".into()));
        let _ = pool.fill_finished(old.id, old.generation, failed, Instant::now());
        assert_eq!(pool.status().last_error, None, "an old fill is not ours");
        assert_eq!(pool.status().size, 1);
        let order = pool.order_fill().unwrap();
        assert!(order.warm_up.is_empty(), "the new configuration's warm-up");
    }
}
