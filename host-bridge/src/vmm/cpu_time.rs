//! CPU time of host processes and threads, from `/proc`: what the guest
//! used, read from the host side so the guest cannot skew it.

use std::path::Path;
use std::time::Duration;

/// CPU time (user + system) of the threads of process `pid` whose name
/// `keep` accepts, or `None` when the process is gone.
pub(super) fn threads_time(pid: u32, keep: impl Fn(&str) -> bool) -> Option<Duration> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let mut ticks: u64 = 0;
    for task in std::fs::read_dir(&tasks).ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !keep(comm.trim_end()) {
            continue;
        }
        if let Some(used) = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| cpu_ticks(&stat))
        {
            ticks = ticks.saturating_add(used);
        }
    }
    Some(ticks_to_duration(ticks))
}

/// CPU time (user + system) of process `pid`, all its threads, or `None`
/// when the process is gone.
pub(super) fn process_time(pid: u32) -> Option<Duration> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    cpu_ticks(&stat).map(ticks_to_duration)
}

fn ticks_to_duration(ticks: u64) -> Duration {
    Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / clock_ticks_per_second())
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
    fn threads_are_chosen_by_name() {
        let none = |_: &str| false;
        assert_eq!(threads_time(std::process::id(), none), Some(Duration::ZERO));
        assert_eq!(threads_time(u32::MAX, none), None);
        assert!(process_time(std::process::id()).is_some());
        assert_eq!(process_time(u32::MAX), None);
    }
}
