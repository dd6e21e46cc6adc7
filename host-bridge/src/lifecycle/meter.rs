//! Metering: what per-second billing needs, read from the host side so the
//! guest cannot skew it.
//!
//! Guest CPU time is the CPU time of QEMU's vCPU threads (named `CPU N/TCG`
//! or `CPU N/KVM`), from `/proc/<qemu>/task/*/stat`: the time the guest's
//! code ran, emulated or not, and nothing of QEMU's own I/O threads.

use std::path::Path;
use std::time::Duration;

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

/// CPU time (user + system) of the vCPU threads of process `pid`, or `None`
/// when the process is gone.
pub(crate) fn vcpu_time(pid: u32) -> Option<Duration> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let ticks_per_second = clock_ticks_per_second();
    let mut ticks: u64 = 0;
    for task in std::fs::read_dir(&tasks).ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("CPU ") {
            continue;
        }
        if let Some(used) = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| cpu_ticks(&stat))
        {
            ticks = ticks.saturating_add(used);
        }
    }
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / ticks_per_second,
    ))
}

fn clock_ticks_per_second() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => u64::try_from(ticks).unwrap_or(100),
        _ => 100,
    }
}

/// utime + stime (fields 14 and 15) of a `/proc/.../stat` line. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted
/// from the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime.saturating_add(stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let stat = "4242 (CPU 0/TCG) R 1 2 3 4 5 6 7 8 9 10 250 17 0 0 20 0 1";
        assert_eq!(cpu_ticks(stat), Some(267));
        let odd = "7 (a) b) S 1 2 3 4 5 6 7 8 9 10 1 2 0 0";
        assert_eq!(cpu_ticks(odd), Some(3));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn a_process_without_vcpu_threads_uses_none() {
        assert_eq!(vcpu_time(std::process::id()), Some(Duration::ZERO));
        assert_eq!(vcpu_time(u32::MAX), None);
    }
}
