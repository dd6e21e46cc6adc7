//! Metering: what per-second billing needs, read from the host side so the
//! guest cannot skew it.
//!
//! Guest CPU time comes from the backend (see `vmm::Backend::guest_cpu`):
//! for QEMU the CPU time of its vCPU threads, the time the guest's code
//! ran, emulated or not, and nothing of QEMU's own I/O threads.

use std::time::Duration;

use crate::saved::SavedUsage;

/// What a sandbox has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxUsage {
    /// Since the sandbox started booting (until it ended).
    pub wall: Duration,
    /// Wall time minus the time it spent paused.
    pub running: Duration,
    /// CPU time of the guest's virtual CPUs (the last reading, once the VM
    /// has ended).
    pub guest_cpu: Duration,
}

impl From<SavedUsage> for SandboxUsage {
    fn from(usage: SavedUsage) -> Self {
        SandboxUsage {
            wall: Duration::from_millis(usage.wall_ms),
            running: Duration::from_millis(usage.running_ms),
            guest_cpu: Duration::from_millis(usage.guest_cpu_ms),
        }
    }
}
