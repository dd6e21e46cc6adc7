//! What outlives the owner of a VM: its lifetime ceiling and wall-clock
//! start, the adoption record kept current, the clock of a VM taken over
//! from a dead owner, and letting the VM go on purpose ([`VmShared::detach`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::{lock, EndReason, SandboxState, VmShared};
use crate::adopt::{from_unix_ms, ms, unix_ms, Keeper, RecordedClock};
use crate::error::{Error, Result};

/// How long the frame being written may take to finish before a detach
/// ends the agent connection (the guest must read it).
const FRAME_END_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`VmShared::detach`] left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// The VM runs on (or stays frozen), for a new owner to adopt.
    Running,
    /// The sandbox was on disk: nothing runs, its saved files stay for a
    /// restore by id.
    OnDisk,
}

impl VmShared {
    /// The lifetime ceiling in force.
    pub fn max_lifetime(&self) -> Option<Duration> {
        *lock(&self.max_lifetime)
    }

    /// Sets the lifetime ceiling of a sandbox being assembled; the
    /// watchdog enforces it from its first tick.
    pub fn limit_lifetime(&self, limit: Option<Duration>) {
        *lock(&self.max_lifetime) = limit;
    }

    /// Sets the lifetime ceiling, counted from the sandbox's start (time
    /// on disk left out). A ceiling already passed ends the sandbox now.
    pub fn set_max_lifetime(&self, limit: Option<Duration>) {
        *lock(&self.max_lifetime) = limit;
        if let Some(keeper) = self.adoption.get() {
            keeper.update(|record| record.policy.max_lifetime_ms = limit.map(ms));
        }
        if let Some(limit) = limit {
            if self.end_reason().is_none() && self.age() >= limit {
                tracing::warn!(
                    ?limit,
                    "the new lifetime ceiling has passed; killing the sandbox"
                );
                self.kill(EndReason::LifetimeExceeded { limit });
            }
        }
    }

    /// When the sandbox's life began, on the wall clock (a pooled
    /// sandbox's: its handout).
    pub fn started_at(&self) -> SystemTime {
        lock(&self.clock).started_wall
    }

    /// When the lifetime ceiling ends the sandbox, if it has one: its
    /// start, plus the ceiling, plus the time it has spent on disk (which
    /// moves this later while it is on disk).
    pub fn ends_at(&self) -> Option<SystemTime> {
        let limit = self.max_lifetime()?;
        let clock = lock(&self.clock);
        let on_disk = clock.on_disk_total
            + clock
                .on_disk_since
                .map_or(Duration::ZERO, |since| since.elapsed());
        Some(clock.started_wall + on_disk + limit)
    }

    /// Keeps `keeper`'s record current from now on (set once, before the
    /// sandbox is handed out).
    pub fn set_adoption(&self, keeper: Keeper) {
        if self.adoption.set(keeper).is_err() {
            tracing::warn!("the adoption record was already kept");
        }
    }

    /// The adoption record's keeper, for an adoptable sandbox.
    pub fn adoption(&self) -> Option<&Keeper> {
        self.adoption.get()
    }

    /// Writes the clock and the VMM process into the adoption record, if
    /// the sandbox has one.
    pub(super) fn note(&self) {
        let Some(keeper) = self.adoption.get() else {
            return;
        };
        let clock = self.recorded_clock();
        let vmm = lock(&self.vmm).identity();
        keeper.update(|record| {
            record.clock = clock;
            if let Some(vmm) = vmm {
                record.vmm = vmm;
            }
        });
    }

    /// The clock as an adoption record keeps it.
    pub fn recorded_clock(&self) -> RecordedClock {
        let clock = lock(&self.clock);
        let now = Instant::now();
        let since = |at: Option<Instant>| at.map_or(Duration::ZERO, |at| now - at);
        RecordedClock {
            started_at_unix_ms: unix_ms(clock.started_wall),
            on_disk_ms: ms(clock.on_disk_total + since(clock.on_disk_since)),
            paused_ms: ms(clock.paused_total + since(clock.paused_since)),
            paused: clock.paused_since.is_some(),
            at_unix_ms: unix_ms(SystemTime::now()),
            guest_cpu_base_ms: ms(clock.guest_cpu_base),
        }
    }

    /// Starts the clock of an adopted VM from its record: wall time from
    /// the recorded start; the time since the record was written counts as
    /// paused if the VM is `frozen` now (the owner froze it, then died),
    /// as running otherwise.
    pub fn adopt_clock(&self, recorded: &RecordedClock, frozen: bool) {
        let now_wall = SystemTime::now();
        let started_wall = from_unix_ms(recorded.started_at_unix_ms);
        let wall = now_wall
            .duration_since(started_wall)
            .unwrap_or(Duration::ZERO);
        let since_record = now_wall
            .duration_since(from_unix_ms(recorded.at_unix_ms))
            .unwrap_or(Duration::ZERO);
        let mut clock = lock(&self.clock);
        let now = Instant::now();
        if let Some(started) = now.checked_sub(wall) {
            clock.started = started;
        }
        clock.started_wall = started_wall;
        clock.paused_total = Duration::from_millis(recorded.paused_ms);
        if frozen {
            clock.paused_total += since_record;
            clock.paused_since = Some(now);
            clock.pauses += 1;
        }
        clock.on_disk_total = Duration::from_millis(recorded.on_disk_ms);
        clock.guest_cpu_base = Duration::from_millis(recorded.guest_cpu_base_ms);
        clock.last_guest_cpu = clock.guest_cpu_base;
    }

    /// Freezes an adopted VM again after its agent was reached (it was
    /// frozen when taken over): the sandbox is paused, as it was.
    pub fn refreeze(&self) -> Result<()> {
        lock(&self.vmm).freeze(true)?;
        self.state.send_replace(SandboxState::Paused);
        Ok(())
    }

    /// Makes the VMM processes this value's own: killed at the sandbox's
    /// end (an adoption sets this once the sandbox is whole; until then a
    /// failure leaves them running for the next attempt).
    pub fn own_vmm(&self, own: bool) {
        lock(&self.vmm).leave(!own);
    }

    /// Lets the VM go without stopping it: the record is brought up to
    /// date, the sandbox ends as [`EndReason::Detached`] for every handle
    /// (calls fail, the watchdog stops), the VMM processes are left
    /// running (a frozen one stays frozen) and the agent connection is
    /// ended, so that a new owner can open its own. A sandbox on disk ends
    /// as a dropped one does: it stays on disk. Needs an adoption record.
    pub async fn detach(&self) -> Result<Left> {
        let _transition = self.transition.lock().await;
        let left = match self.state() {
            SandboxState::Ended(reason) => return Err(Error::SandboxEnded { reason }),
            SandboxState::OnDisk => Left::OnDisk,
            SandboxState::Running | SandboxState::Paused => Left::Running,
        };
        if left == Left::Running {
            self.note();
            lock(&self.vmm).leave(true);
        }
        self.keep_saved.store(true, Ordering::SeqCst);
        self.end(EndReason::Detached);
        if left == Left::Running {
            let ended = self.quiesce.end_between_frames(FRAME_END_TIMEOUT).await;
            tracing::debug!(?ended, "agent connection ended for a detach");
        }
        tracing::info!(pid = self.pid(), ?left, "sandbox detached");
        Ok(left)
    }
}
