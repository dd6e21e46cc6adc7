//! [`VmShared`]: the VM behind every handle on one sandbox.
//!
//! It owns the VMM processes after boot and is the one place that changes
//! the sandbox's [`SandboxState`]: pause and resume (serialized, and with
//! the host's time pushed to the guest on resume), and the end, whoever
//! causes it (the owner, the watchdog, or the VM itself). The first reason
//! recorded for the end is the one every handle reports.
//!
//! It also holds the lifetime ceiling (which [`VmShared::set_max_lifetime`]
//! changes and the watchdog reads) and, for an adoptable sandbox, the
//! adoption record's keeper: each change of state or clock rewrites the
//! record (see `adopt` below, and `crate::adopt`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{CheckRequest, SetClockRequest};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tonic::transport::Channel;

use super::meter::SandboxUsage;
use super::{ClockError, EndReason, PausedCalls, SandboxState, Unavailable};
use airlock_proto::Feature;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::transport::{AgentTransport, CapMessages, Quiesce};
use crate::vmm::{Backend, Quit};
use crate::workspace::Workspace;

mod ownership;
mod persist;

pub(crate) use ownership::Left;
pub(crate) use persist::{relaunch, Persistence};

/// How much console output an unexpected end reports.
const CONSOLE_TAIL_BYTES: usize = 4096;
/// How long the clock push after a resume may take.
const SET_CLOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a VM's life was when a call began: its saves to disk, and the
/// connections ended for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallEpoch {
    saves: u64,
    cuts: u64,
}

/// What a snapshot that ended the agent connection was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutFor {
    /// A save to disk.
    Save,
    /// A fork's source.
    Fork,
}

/// Time accounting, under one lock.
#[derive(Debug)]
struct Clock {
    started: Instant,
    /// `started` on the wall clock (what an adoption record keeps).
    started_wall: SystemTime,
    paused_since: Option<Instant>,
    paused_total: Duration,
    /// Pauses begun so far.
    pauses: u64,
    /// Saves to disk so far.
    saves: u64,
    /// Connections the host ended for a snapshot (a save or a fork).
    cuts: u64,
    last_cut: Option<CutFor>,
    ended_at: Option<Instant>,
    last_guest_cpu: Duration,
    /// Guest CPU time of earlier VM processes (before a save to disk).
    guest_cpu_base: Duration,
    /// Time spent saved to disk, which the lifetime ceiling leaves out.
    on_disk_total: Duration,
    on_disk_since: Option<Instant>,
}

/// The shared VM.
#[derive(Debug)]
pub(crate) struct VmShared {
    vmm: Mutex<Backend>,
    /// The backend's main process, for logs.
    pid: AtomicU32,
    transport: AgentTransport,
    quit: Quit,
    /// Whether a resume pushes the host's time to the guest.
    push_clock: bool,
    state: watch::Sender<SandboxState>,
    clock: Mutex<Clock>,
    /// Calls in flight, and when the count last dropped to zero.
    in_flight: AtomicUsize,
    quiet_since: Mutex<Instant>,
    /// Serializes pause, resume and the admission of calls.
    transition: tokio::sync::Mutex<()>,
    /// Set before a graceful shutdown, so its exit counts as `Stopped`.
    stopping: AtomicBool,
    /// The agent's channel without the gate, for the clock push.
    raw_channel: Channel,
    /// Ends the channel's connection between frames before a snapshot.
    quiesce: Quiesce,
    features: AgentFeatures,
    /// A manager's slot, given back when the VM ends.
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    /// The workspace's lock, let go when the VM ends (not when the last
    /// handle goes: a server keeps ended sandboxes listed for a while, and
    /// the next sandbox may take the workspace at once).
    workspace: Mutex<Option<Workspace>>,
    /// How to save the VM to disk and start it again (QEMU on the serial
    /// channel only).
    persistence: Option<Persistence>,
    /// What the last restore from disk used and refused.
    last_restore: Mutex<Option<crate::saved::Restored>>,
    /// Whether the saved files outlive the end (a handle dropped while the
    /// sandbox is on disk leaves it there, to be restored later).
    keep_saved: AtomicBool,
    /// The lifetime ceiling (counted by [`age`](VmShared::age)).
    max_lifetime: Mutex<Option<Duration>>,
    /// An adoptable sandbox's record, kept current.
    adoption: OnceLock<crate::adopt::Keeper>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl VmShared {
    pub fn new(
        vmm: Backend,
        started: Instant,
        raw_channel: Channel,
        quiesce: Quiesce,
        features: AgentFeatures,
        slot: Option<OwnedSemaphorePermit>,
        persistence: Option<Persistence>,
    ) -> Arc<Self> {
        let (state, _) = watch::channel(SandboxState::Running);
        Arc::new(VmShared {
            pid: AtomicU32::new(vmm.pid()),
            transport: vmm.transport(),
            quit: vmm.quit(),
            push_clock: vmm.has_own_clock(),
            vmm: Mutex::new(vmm),
            state,
            clock: Mutex::new(Clock {
                started,
                started_wall: SystemTime::now()
                    .checked_sub(started.elapsed())
                    .unwrap_or_else(SystemTime::now),
                paused_since: None,
                paused_total: Duration::ZERO,
                pauses: 0,
                saves: 0,
                cuts: 0,
                last_cut: None,
                ended_at: None,
                last_guest_cpu: Duration::ZERO,
                guest_cpu_base: Duration::ZERO,
                on_disk_total: Duration::ZERO,
                on_disk_since: None,
            }),
            in_flight: AtomicUsize::new(0),
            quiet_since: Mutex::new(Instant::now()),
            transition: tokio::sync::Mutex::new(()),
            stopping: AtomicBool::new(false),
            raw_channel,
            quiesce,
            features,
            slot: Mutex::new(slot),
            workspace: Mutex::new(None),
            persistence,
            last_restore: Mutex::new(None),
            keep_saved: AtomicBool::new(false),
            max_lifetime: Mutex::new(None),
            adoption: OnceLock::new(),
        })
    }

    /// Holds a manager's slot until the VM ends (a sandbox made before a
    /// manager took it, a fork's child).
    pub fn hold_slot(&self, slot: OwnedSemaphorePermit) {
        if self.end_reason().is_none() {
            *lock(&self.slot) = Some(slot);
        }
    }

    /// Holds the workspace's lock until the VM ends.
    pub fn hold_workspace(&self, workspace: Option<Workspace>) {
        if self.end_reason().is_none() {
            *lock(&self.workspace) = workspace;
        }
    }

    /// The backend's main process id, for logs.
    fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    pub fn state(&self) -> SandboxState {
        self.state.borrow().clone()
    }

    pub fn end_reason(&self) -> Option<EndReason> {
        match &*self.state.borrow() {
            SandboxState::Ended(reason) => Some(reason.clone()),
            _ => None,
        }
    }

    /// How long the sandbox has lived, time saved to disk left out: what
    /// the lifetime ceiling measures.
    pub fn age(&self) -> Duration {
        let clock = lock(&self.clock);
        let on_disk = clock.on_disk_total
            + clock
                .on_disk_since
                .map_or(Duration::ZERO, |since| since.elapsed());
        clock.started.elapsed().saturating_sub(on_disk)
    }

    /// How many pauses have begun, plus how many connections were ended
    /// for a snapshot: a change between two readings means the VM was
    /// paused or snapshotted in between (it may be running again), which
    /// explains a broken output stream.
    pub fn interruptions(&self) -> u64 {
        let clock = lock(&self.clock);
        clock.pauses + clock.cuts
    }

    /// Where the VM's life is, for [`why_broken`](VmShared::why_broken)
    /// to compare with later: a change in its saves means the VM's process
    /// (and every connection) ended in between.
    pub fn epoch(&self) -> CallEpoch {
        let clock = lock(&self.clock);
        CallEpoch {
            saves: clock.saves,
            cuts: clock.cuts,
        }
    }

    /// Why a call begun at `epoch` broke, if the sandbox's life explains
    /// it.
    pub fn why_broken(&self, epoch: CallEpoch) -> Option<Unavailable> {
        if let Some(reason) = self.end_reason() {
            return Some(Unavailable::Ended(reason));
        }
        let now = self.epoch();
        if now.saves != epoch.saves || self.state() == SandboxState::OnDisk {
            return Some(Unavailable::SavedDuringCall);
        }
        if now.cuts == epoch.cuts {
            return None;
        }
        Some(match lock(&self.clock).last_cut {
            Some(CutFor::Fork) => Unavailable::ForkedDuringCall,
            Some(CutFor::Save) | None => Unavailable::SavedDuringCall,
        })
    }

    /// Counts a connection ended for a snapshot, before it is ended, so
    /// that the calls it breaks can say why.
    pub(super) fn count_cut(&self, purpose: CutFor) {
        let mut clock = lock(&self.clock);
        clock.cuts += 1;
        clock.last_cut = Some(purpose);
    }

    /// Waits up to `wait` for the VM to end, and says why it did.
    pub async fn ended_within(&self, wait: Duration) -> Option<EndReason> {
        let mut states = self.state.subscribe();
        let ended = tokio::time::timeout(
            wait,
            states.wait_for(|state| matches!(state, SandboxState::Ended(_))),
        )
        .await;
        match ended {
            Ok(Ok(state)) => match &*state {
                SandboxState::Ended(reason) => Some(reason.clone()),
                _ => None,
            },
            _ => self.end_reason(),
        }
    }

    // ---- calls in flight ----

    /// Counts a call as in flight until the guard is dropped.
    pub fn begin_call(self: &Arc<Self>) -> CallGuard {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        CallGuard(Arc::clone(self))
    }

    /// How long the sandbox has had no call in flight (zero if it has one).
    pub fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        lock(&self.quiet_since).elapsed()
    }

    /// Lets a call through, or says why not; a paused VM is resumed, waited
    /// for or refused as `policy` says.
    pub async fn admit(&self, policy: PausedCalls) -> Result<(), Unavailable> {
        loop {
            {
                let _transition = self.transition.lock().await;
                match self.state() {
                    SandboxState::Running => return Ok(()),
                    SandboxState::Ended(reason) => return Err(Unavailable::Ended(reason)),
                    SandboxState::Paused | SandboxState::OnDisk => {}
                }
            }
            match policy {
                PausedCalls::Fail => return Err(Unavailable::Paused),
                PausedCalls::Resume => {
                    if let Err(error) = self.resume().await {
                        let cause = crate::error_chain(&error);
                        tracing::warn!(error = %cause, "resume for a call failed");
                        if let Some(reason) = self.end_reason() {
                            return Err(Unavailable::Ended(reason));
                        }
                        return Err(Unavailable::ResumeFailed(cause));
                    }
                }
                PausedCalls::Wait => {
                    let mut states = self.state.subscribe();
                    // A closed channel cannot happen while `self` lives.
                    let _ = states.wait_for(|state| !state.is_paused()).await;
                }
            }
        }
    }

    // ---- pause and resume ----

    /// Stops the VM's CPUs. Pausing a paused sandbox does nothing.
    pub async fn pause(&self) -> Result<()> {
        let _transition = self.transition.lock().await;
        self.pause_locked().await
    }

    /// Pauses only if still no call is in flight after `after` (checked
    /// under the same lock that admits calls, so none slips in between).
    pub async fn pause_if_idle(&self, after: Duration) -> Result<bool> {
        let _transition = self.transition.lock().await;
        if self.state() != SandboxState::Running || self.idle_for() < after {
            return Ok(false);
        }
        self.pause_locked().await.map(|()| true)
    }

    async fn pause_locked(&self) -> Result<()> {
        match self.state() {
            SandboxState::Running => {}
            SandboxState::Paused | SandboxState::OnDisk => return Ok(()),
            SandboxState::Ended(reason) => return Err(Error::SandboxEnded { reason }),
        }
        lock(&self.vmm).freeze(true)?;
        {
            let mut clock = lock(&self.clock);
            clock.paused_since = Some(Instant::now());
            clock.pauses += 1;
        }
        self.state.send_replace(SandboxState::Paused);
        self.note();
        tracing::info!(pid = self.pid(), "sandbox paused");
        Ok(())
    }

    /// Restarts the VM's CPUs and sets the guest clock to the host's.
    /// Resuming a running sandbox does nothing.
    pub async fn resume(&self) -> Result<()> {
        let _transition = self.transition.lock().await;
        match self.state() {
            SandboxState::Paused => {}
            SandboxState::OnDisk => return self.restore_locked().await,
            SandboxState::Running => return Ok(()),
            SandboxState::Ended(reason) => return Err(Error::SandboxEnded { reason }),
        }
        lock(&self.vmm).freeze(false)?;
        {
            let mut clock = lock(&self.clock);
            if let Some(since) = clock.paused_since.take() {
                clock.paused_total += since.elapsed();
            }
        }
        *lock(&self.quiet_since) = Instant::now();
        // The clock goes first, so no call sees the stale time.
        if self.push_clock {
            self.push_clock().await;
        }
        self.state.send_replace(SandboxState::Running);
        self.note();
        tracing::info!(pid = self.pid(), "sandbox resumed");
        Ok(())
    }

    /// Pushes the host's wall-clock time to the guest. A failure is logged,
    /// not fatal: the sandbox runs, with a clock that lags.
    async fn push_clock(&self) {
        if !self.features.has(Feature::SetClock) {
            tracing::warn!(
                revision = self.features.revision(),
                "agent too old to set its clock; the guest clock lags by the pause"
            );
            return;
        }
        if let Err(error) = self.set_clock(SET_CLOCK_TIMEOUT).await {
            tracing::warn!(error = %crate::error_chain(&error), "guest clock not set");
        }
    }

    /// Sets the guest's clock to the host's wall-clock time, or says why
    /// it could not within `timeout`.
    async fn set_clock(&self, timeout: Duration) -> Result<(), ClockError> {
        let unix_nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut client = SystemClient::new(self.raw_channel.clone()).capped();
        let call = client.set_clock(SetClockRequest { unix_nanos });
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => {
                tracing::debug!(
                    adjusted_by_ms = answer.into_inner().adjusted_by_nanos / 1_000_000,
                    "guest clock set"
                );
                Ok(())
            }
            Ok(Err(status)) => Err(ClockError::Refused(status)),
            Err(_) => Err(ClockError::NoAnswer(timeout)),
        }
    }

    // ---- the end ----

    /// Kills the VM now and records `reason` (unless it had already ended).
    /// A detached VM is left running.
    pub fn kill(&self, reason: EndReason) {
        self.sample_guest_cpu();
        // The reason is recorded before the VMM lock is let go: the
        // watchdog's `check_exit` would otherwise see the exit first and
        // report it as the VM's own.
        let mut vmm = lock(&self.vmm);
        vmm.kill();
        self.end(reason);
        drop(vmm);
    }

    /// Checks whether the VMM (QEMU) has exited by itself; if so, takes the
    /// vsock device down too (which breaks every open call) and records why.
    pub fn check_exit(&self) -> bool {
        let exited = {
            let mut vmm = lock(&self.vmm);
            // A VM saved to disk was ended on purpose (under this lock).
            if self.state() == SandboxState::OnDisk {
                return false;
            }
            match vmm.try_exit() {
                Ok(Some(status)) => {
                    vmm.kill();
                    Some((status, vmm.diagnostics(CONSOLE_TAIL_BYTES)))
                }
                Ok(None) => None,
                Err(error) => {
                    tracing::warn!(%error, "cannot check on QEMU");
                    None
                }
            }
        };
        let Some((status, console_tail)) = exited else {
            return false;
        };
        let reason = if self.stopping.load(Ordering::SeqCst) {
            EndReason::Stopped
        } else {
            tracing::warn!(%status, "the VM exited by itself");
            EndReason::VmExited {
                status: status.to_string(),
                console_tail,
            }
        };
        self.end(reason);
        true
    }

    /// Marks a graceful shutdown in progress.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Waits up to `timeout` for the VMM to exit by itself.
    pub async fn wait_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.check_exit() || self.end_reason().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Asks the VMM to end gracefully (QEMU: QMP `quit`).
    pub async fn quit(&self) {
        self.quit.send().await;
    }

    /// How the host reaches the agent.
    pub fn transport(&self) -> &AgentTransport {
        &self.transport
    }

    pub fn console_tail(&self, max_bytes: usize) -> String {
        lock(&self.vmm).diagnostics(max_bytes)
    }

    fn end(&self, reason: EndReason) {
        {
            let mut clock = lock(&self.clock);
            let now = Instant::now();
            if clock.ended_at.is_none() {
                clock.ended_at = Some(now);
                if let Some(since) = clock.paused_since.take() {
                    clock.paused_total += now.saturating_duration_since(since);
                }
            }
        }
        self.state.send_if_modified(|state| {
            if matches!(state, SandboxState::Ended(_)) {
                return false;
            }
            tracing::info!(%reason, "sandbox ended");
            *state = SandboxState::Ended(reason);
            true
        });
        lock(&self.slot).take();
        lock(&self.workspace).take();
        if !self.keep_saved.load(Ordering::SeqCst) {
            self.forget_saved();
        }
    }

    /// Whether the agent answers a Health check within `timeout`, on the
    /// raw channel (so the probe is not activity and never resumes).
    pub async fn answers_within(&self, timeout: Duration) -> bool {
        let mut client = HealthClient::new(self.raw_channel.clone()).capped();
        matches!(
            tokio::time::timeout(timeout, client.check(CheckRequest {})).await,
            Ok(Ok(_))
        )
    }

    /// Keeps the console log within `budget` bytes of disk.
    pub fn bound_console_log(&self, budget: u64) {
        lock(&self.vmm).bound_console_log(budget);
    }

    // ---- metering ----

    /// Reads the guest's CPU time while the VM is there to read.
    pub fn sample_guest_cpu(&self) {
        let cpu = lock(&self.vmm).guest_cpu();
        if let Some(cpu) = cpu {
            let mut clock = lock(&self.clock);
            if clock.ended_at.is_none() {
                let total = clock.guest_cpu_base + cpu;
                clock.last_guest_cpu = clock.last_guest_cpu.max(total);
            }
        }
    }

    /// Counts wall time, paused time and the lifetime ceiling from now
    /// on: a manager's pool hands a sandbox out with its life starting at
    /// the handout. Guest CPU time keeps counting from the start.
    pub fn restart_clock(&self) {
        let mut clock = lock(&self.clock);
        if clock.ended_at.is_some() {
            return;
        }
        let now = Instant::now();
        clock.started = now;
        clock.started_wall = SystemTime::now();
        clock.paused_total = Duration::ZERO;
        clock.on_disk_total = Duration::ZERO;
        clock.paused_since = clock.paused_since.map(|_| now);
        drop(clock);
        // A pool member's record is written from its handout on.
        if let Some(keeper) = self.adoption.get() {
            if let Err(error) = keeper.activate() {
                tracing::warn!(error = %crate::error_chain(&error), "cannot write the adoption record");
            }
        }
        self.note();
    }

    pub fn usage(&self) -> SandboxUsage {
        if self.end_reason().is_none() {
            self.sample_guest_cpu();
        }
        let clock = lock(&self.clock);
        let until = clock.ended_at.unwrap_or_else(Instant::now);
        let wall = until.saturating_duration_since(clock.started);
        let paused = clock.paused_total
            + clock.paused_since.map_or(Duration::ZERO, |since| {
                until.saturating_duration_since(since)
            });
        let on_disk = clock.on_disk_total
            + clock.on_disk_since.map_or(Duration::ZERO, |since| {
                until.saturating_duration_since(since)
            });
        SandboxUsage {
            wall,
            running: wall.saturating_sub(paused),
            on_disk: on_disk.min(paused),
            guest_cpu: clock.last_guest_cpu,
        }
    }
}

/// A call in flight; dropping it ends the call.
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<VmShared>);

impl CallGuard {
    pub fn vm(&self) -> &Arc<VmShared> {
        &self.0
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *lock(&self.0.quiet_since) = Instant::now();
        }
    }
}
