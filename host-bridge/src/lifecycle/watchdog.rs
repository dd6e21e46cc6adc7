//! The per-sandbox watchdog: a task that notices the VM's own end within a
//! tick, kills the VM at its lifetime ceiling, parks or stops it when it
//! has been idle too long, and keeps a flooded console log within its
//! disk budget.
//!
//! It holds the VM weakly, so it never keeps a dropped sandbox alive, and
//! stops once the VM has ended.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::vm::VmShared;
use super::{EndReason, IdlePolicy, SandboxState};

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(100);
/// How often (in ticks) it reads the guest's CPU time (so the figure
/// survives a VM that dies without warning) and bounds the console log.
const CPU_SAMPLE_TICKS: u32 = 10;

/// What the watchdog enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub max_lifetime: Option<Duration>,
    pub idle: Option<(Duration, IdlePolicy)>,
    /// Disk the guest console's log may take.
    pub console_log_budget: u64,
}

/// Starts the watchdog of `vm`.
pub(crate) fn spawn(vm: &Arc<VmShared>, policy: Policy) -> JoinHandle<()> {
    let vm = Arc::downgrade(vm);
    tokio::spawn(async move { watch(vm, policy).await })
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
        if let Some(limit) = policy.max_lifetime {
            if vm.started().elapsed() >= limit {
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
