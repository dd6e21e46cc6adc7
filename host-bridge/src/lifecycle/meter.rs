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
    /// The part of the paused time it spent saved to disk (holding no
    /// memory); the rest of `wall - running` it was paused in memory.
    pub on_disk: Duration,
    /// CPU time of the guest's virtual CPUs (the last reading, once the VM
    /// has ended).
    pub guest_cpu: Duration,
}

/// The bytes a sandbox's connections carried, counted on the host as they
/// pass, from when this handle was made (an adopted or restored sandbox's
/// new handle counts from zero): egress on the connections its programs
/// opened (the gateway's), ingress on connections into its ports
/// (`Sandbox::connect_port`, which the server's ingress uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// Bytes the guest sent on its own connections.
    pub egress_sent: u64,
    /// Bytes the guest received on its own connections.
    pub egress_received: u64,
    /// Bytes clients sent into the guest's ports.
    pub ingress_received: u64,
    /// Bytes the guest's servers sent back to them.
    pub ingress_sent: u64,
}

impl SandboxUsage {
    /// The time it was paused in memory: paused, but not on disk.
    pub fn paused_in_memory(&self) -> Duration {
        self.wall
            .saturating_sub(self.running)
            .saturating_sub(self.on_disk)
    }
}

/// The usage as the save recorded it (time on disk since then left out;
/// see [`SavedUsage::until`]).
impl From<SavedUsage> for SandboxUsage {
    fn from(usage: SavedUsage) -> Self {
        SandboxUsage {
            wall: Duration::from_millis(usage.wall_ms),
            running: Duration::from_millis(usage.running_ms),
            on_disk: Duration::from_millis(usage.on_disk_ms),
            guest_cpu: Duration::from_millis(usage.guest_cpu_ms),
        }
    }
}

impl SavedUsage {
    /// The usage of a sandbox that is still on disk at `now_unix_ms`, as a
    /// restore then would carry it on: the time since the save is wall
    /// time, and time on disk.
    pub fn until(&self, now_unix_ms: u64) -> SandboxUsage {
        let since = Duration::from_millis(now_unix_ms.saturating_sub(self.saved_at_unix_ms));
        let saved = SandboxUsage::from(*self);
        SandboxUsage {
            wall: saved.wall + since,
            on_disk: saved.on_disk + since,
            ..saved
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_sandbox_accrues_time_on_disk_until_now() {
        let saved = SavedUsage {
            wall_ms: 10_000,
            running_ms: 6_000,
            guest_cpu_ms: 2_000,
            on_disk_ms: 1_000,
            saved_at_unix_ms: 50_000,
        };
        let usage = saved.until(53_500);
        assert_eq!(usage.wall, Duration::from_millis(13_500));
        assert_eq!(usage.running, Duration::from_millis(6_000));
        assert_eq!(usage.on_disk, Duration::from_millis(4_500));
        assert_eq!(usage.guest_cpu, Duration::from_millis(2_000));
        assert_eq!(usage.paused_in_memory(), Duration::from_millis(3_000));
        // A clock that went back counts nothing more.
        assert_eq!(saved.until(40_000), SandboxUsage::from(saved));
    }
}
