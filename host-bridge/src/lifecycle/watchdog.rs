//! The per-sandbox watchdog: a task that notices the VM's own end within a
//! tick, kills the VM at its lifetime ceiling, parks or stops it when it
//! has been idle too long, and keeps a flooded console log within its
//! disk budget. A second task probes the agent and kills a VM whose agent
//! has stopped answering (a hung guest).
//!
//! It holds the VM weakly, so it never keeps a dropped sandbox alive, and
//! stops once the VM has ended.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::vm::VmShared;
use super::{EndReason, IdlePolicy, SandboxState};

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(100);
/// How often (in ticks) it reads the guest's CPU time (so the figure
/// survives a VM that dies without warning) and bounds the console log.
const CPU_SAMPLE_TICKS: u32 = 10;

/// What the watchdog enforces, besides the lifetime ceiling (which lives
/// in the VM, since it can change: [`VmShared::set_max_lifetime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub idle: Option<(Duration, IdlePolicy)>,
    /// Disk the guest console's log may take.
    pub console_log_budget: u64,
    /// How long the agent may go without answering while running.
    pub unresponsive_after: Option<Duration>,
}

/// Starts the watchdog of `vm` (and its liveness probe, which ends by
/// itself once the VM has ended).
pub(crate) fn spawn(vm: &Arc<VmShared>, policy: Policy) -> JoinHandle<()> {
    if let Some(after) = policy.unresponsive_after {
        let vm = Arc::downgrade(vm);
        tokio::spawn(async move { probe(vm, after).await });
    }
    let vm = Arc::downgrade(vm);
    tokio::spawn(async move { watch(vm, policy).await })
}

/// Asks the agent for Health every `after / 4` (1 to 10 s) while the VM
/// runs, and kills the VM once no answer has come for `after`. Paused time
/// does not count: a frozen guest cannot answer.
async fn probe(vm: Weak<VmShared>, after: Duration) {
    let every = (after / 4).clamp(Duration::from_secs(1), Duration::from_secs(10));
    let mut last_answer = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(vm) = vm.upgrade() else { return };
        match vm.state() {
            SandboxState::Ended(_) => return,
            SandboxState::Paused | SandboxState::OnDisk => {
                last_answer = Instant::now();
                continue;
            }
            SandboxState::Running => {}
        }
        if vm.answers_within(every).await || vm.state() != SandboxState::Running {
            last_answer = Instant::now();
            continue;
        }
        if last_answer.elapsed() >= after {
            tracing::warn!(?after, "the agent stopped answering; killing the VM");
            vm.kill(EndReason::Unresponsive { after });
            return;
        }
    }
}

async fn watch(vm: Weak<VmShared>, policy: Policy) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u32 = 0;
    loop {
        tick.tick().await;
        let Some(vm) = vm.upgrade() else { return };
        if vm.end_reason().is_some() || vm.check_exit() {
            return;
        }
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(CPU_SAMPLE_TICKS) {
            vm.sample_guest_cpu();
            vm.bound_console_log(policy.console_log_budget);
        }
        if let Some(limit) = vm.max_lifetime() {
            if vm.age() >= limit {
                tracing::warn!(?limit, "sandbox reached its maximum lifetime; killing it");
                vm.kill(EndReason::LifetimeExceeded { limit });
                return;
            }
        }
        if let Some((after, idle_policy)) = policy.idle {
            if vm.state() == SandboxState::Running && vm.idle_for() >= after {
                match idle_policy {
                    IdlePolicy::Pause => match vm.pause_if_idle(after).await {
                        Ok(true) => tracing::info!(?after, "idle sandbox paused"),
                        Ok(false) => {}
                        Err(error) => {
                            tracing::warn!(error = %crate::error_chain(&error), "idle pause failed")
                        }
                    },
                    IdlePolicy::PauseToDisk => match vm.pause_to_disk_if_idle(after).await {
                        Ok(true) => tracing::info!(?after, "idle sandbox saved to disk"),
                        Ok(false) => {}
                        Err(error) => {
                            tracing::warn!(error = %crate::error_chain(&error), "idle save to disk failed")
                        }
                    },
                    IdlePolicy::Stop => {
                        tracing::info!(?after, "idle sandbox stopped");
                        vm.kill(EndReason::Idle { after });
                        return;
                    }
                }
            }
        }
    }
}
