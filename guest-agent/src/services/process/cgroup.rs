//! One cgroup v2 per program, so its whole process tree can be signalled,
//! killed (`cgroup.kill`) and checked for OOM kills (`memory.events`).
//!
//! [`Cgroups::detect`] looks at `/sys/fs/cgroup` (which PID 1 mounts as
//! cgroup2) and the agent's own cgroup from `/proc/self/cgroup`, creates a
//! parent `airlock` (`airlock-<pid>` outside PID 1) below it and enables the
//! memory controller where it can. Where any of that fails (no cgroup2, a
//! read-only hierarchy in a test container), the agent runs without
//! cgroups and trees are reached through process groups instead; that is
//! logged at debug level.
//!
//! [`Cgroups::create`] hands out `exec-<n>` for one program; the program is
//! born in it (`CLONE_INTO_CGROUP`, see `crate::spawn`), so nothing it
//! forks escapes. The cgroup was made ahead, after the previous program
//! took its own, and finished programs' cgroups are removed, on a
//! low-priority thread (`housekeeping`): `mkdir` and `rmdir` in cgroupfs
//! cost a millisecond or more each under emulation.
//!
//! Resilience: the memory, pids and cpu controllers are enabled where the
//! kernel allows; as PID 1 the agent caps the parent's `memory.max` at the
//! guest's total less [`agent_headroom`], so no program (nor all of them
//! together) can take the memory the agent needs to keep serving. Per
//! program, [`Cgroup::apply`] writes the request's limits, and
//! [`Cgroup::usage`] reads back what the tree used.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};
use nix::unistd::Pid;

use airlock_proto::v1::{Limits, Usage};

use super::housekeeping::Housekeeping;

/// Where PID 1 mounts the cgroup2 hierarchy.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// Rounds of "list the members, signal the new ones" before giving up on a
/// tree that keeps forking (SIGKILL uses `cgroup.kill`, which is atomic).
const SIGNAL_ROUNDS: usize = 16;

/// The parent cgroup the agent creates program cgroups in.
#[derive(Debug)]
pub struct Cgroups {
    parent: PathBuf,
    next: AtomicU64,
    /// A cgroup made ahead for the next program.
    spare: Mutex<Option<Cgroup>>,
    /// Makes spares and removes finished cgroups off the hot path.
    housekeeping: Housekeeping,
}

/// One program's cgroup.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    /// Its directory, open: what a clone is born in, and what the files
    /// read at every exit are opened from.
    dir: OwnedFd,
}

impl Cgroups {
    /// Finds or makes the agent's parent cgroup; `None` when the agent
    /// cannot use cgroups here.
    pub fn detect() -> Option<Self> {
        match Self::try_detect(Path::new(CGROUP_MOUNT)) {
            Ok(cgroups) => {
                tracing::info!(parent = %cgroups.parent.display(), "one cgroup per process");
                Some(cgroups)
            }
            Err(why) => {
                tracing::debug!(
                    why,
                    "no cgroups; process trees are signalled by process group"
                );
                None
            }
        }
    }

    fn try_detect(mount: &Path) -> Result<Self, String> {
        let fs = statfs(mount).map_err(|e| format!("statfs {}: {e}", mount.display()))?;
        if fs.filesystem_type() != CGROUP2_SUPER_MAGIC {
            return Err(format!("{} is not cgroup2", mount.display()));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let own = unified_path(&own).ok_or("no cgroup2 entry in /proc/self/cgroup")?;
        let base = mount.join(own.trim_start_matches('/'));
        let pid = std::process::id();
        let name = if pid == 1 {
            "airlock".to_owned()
        } else {
            format!("airlock-{pid}")
        };
        let parent = base.join(name);
        match std::fs::create_dir(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("mkdir {}: {e}", parent.display())),
        }
        if !parent.join("cgroup.procs").exists() {
            return Err(format!("{} is not a cgroup", parent.display()));
        }
        // The memory controller makes OOM kills visible per program. Enabling
        // it fails below a cgroup that holds processes (the agent's own, in
        // tests); programs still get cgroups, just without OOM reporting.
        for dir in [&base, &parent] {
            for controller in ["+memory", "+pids", "+cpu"] {
                if let Err(e) = std::fs::write(dir.join("cgroup.subtree_control"), controller) {
                    tracing::debug!(dir = %dir.display(), controller, error = %e, "controller not enabled");
                }
            }
        }
        if pid == 1 {
            reserve_agent_headroom(&parent);
        }
        let cgroups = Self {
            parent,
            next: AtomicU64::new(1),
            spare: Mutex::new(None),
            housekeeping: Housekeeping::start(),
        };
        cgroups.make_spare();
        Ok(cgroups)
    }

    /// The parent directory all program cgroups live in.
    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// A fresh cgroup for one program: the spare made ahead if there is
    /// one, else a new one; then the next spare is made in the background.
    pub fn create(self: &Arc<Self>) -> std::io::Result<Cgroup> {
        let spare = self.spare_slot().take();
        let cgroup = match spare {
            Some(cgroup) => cgroup,
            None => self.make()?,
        };
        let cgroups = Arc::clone(self);
        self.housekeeping.run(move || cgroups.make_spare());
        Ok(cgroup)
    }

    /// Runs `job` (cgroup work that nothing waits for) in the background.
    pub fn in_background(&self, job: impl FnOnce() + Send + 'static) {
        self.housekeeping.run(job);
    }

    fn make(&self) -> std::io::Result<Cgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.parent.join(format!("exec-{n}"));
        std::fs::create_dir(&path)?;
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY)
            .open(&path);
        match dir {
            Ok(dir) => Ok(Cgroup {
                path,
                dir: dir.into(),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                Err(e)
            }
        }
    }

    /// Makes the spare if there is none; a failure is left for `create` to
    /// meet and report.
    fn make_spare(&self) {
        if self.spare_slot().is_some() {
            return;
        }
        match self.make() {
            Ok(cgroup) => {
                if let Some(extra) = self.spare_slot().replace(cgroup) {
                    let _ = extra.remove();
                }
            }
            Err(e) => tracing::debug!(error = %e, "no spare cgroup"),
        }
    }

    fn spare_slot(&self) -> MutexGuard<'_, Option<Cgroup>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Cgroup {
    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cgroup's directory, open: a clone given it
    /// (`CLONE_INTO_CGROUP`) is born in the cgroup.
    pub fn directory(&self) -> std::io::Result<OwnedFd> {
        self.dir.try_clone()
    }

    /// The pids in the cgroup now.
    pub fn pids(&self) -> std::io::Result<Vec<i32>> {
        let text = std::fs::read_to_string(self.path.join("cgroup.procs"))?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Whether any process is left in the cgroup.
    pub fn is_populated(&self) -> bool {
        self.pids().map(|p| !p.is_empty()).unwrap_or(false)
    }

    /// Sends `signal` to every process in the cgroup, including those forked
    /// while signalling; returns how many were signalled. SIGKILL goes
    /// through `cgroup.kill`, which the kernel applies atomically.
    pub fn signal(&self, signal: Signal) -> std::io::Result<usize> {
        if signal == Signal::SIGKILL {
            let members = self.pids()?.len();
            if members == 0 {
                return Ok(0);
            }
            match std::fs::write(self.path.join("cgroup.kill"), "1") {
                Ok(()) => return Ok(members),
                // Kernels before 5.14 have no cgroup.kill: signal one by one.
                Err(e) => tracing::debug!(error = %e, "cgroup.kill unavailable"),
            }
        }
        let mut signalled: Vec<i32> = Vec::new();
        for _ in 0..SIGNAL_ROUNDS {
            let fresh: Vec<i32> = self
                .pids()?
                .into_iter()
                .filter(|p| !signalled.contains(p))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                match kill(Pid::from_raw(pid), signal) {
                    Ok(()) | Err(Errno::ESRCH) => {}
                    Err(e) => tracing::debug!(pid, error = %e, "kill failed"),
                }
                signalled.push(pid);
            }
        }
        Ok(signalled.len())
    }

    /// How many processes of this cgroup the OOM killer killed, when the
    /// memory controller is enabled for it.
    pub fn oom_kills(&self) -> Option<u64> {
        let events = crate::small_file::read_at(&self.dir, "memory.events")?;
        oom_kill_count(&events)
    }

    /// Writes `limits` to the cgroup's control files; a limit the kernel
    /// cannot take (controller not enabled) fails the start, since the
    /// program would otherwise run unbounded.
    pub fn apply(&self, limits: &Limits) -> std::io::Result<()> {
        let mut writes: Vec<(&str, String)> = Vec::new();
        if limits.memory_bytes > 0 {
            writes.push(("memory.max", limits.memory_bytes.to_string()));
            writes.push(("memory.swap.max", "0".to_owned()));
        }
        if limits.pids > 0 {
            writes.push(("pids.max", limits.pids.to_string()));
        }
        if limits.cpu_millis > 0 {
            writes.push(("cpu.max", cpu_max(limits.cpu_millis)));
        }
        for (file, value) in writes {
            match std::fs::write(self.path.join(file), &value) {
                Ok(()) => {}
                // No swap configured: there is no swap to turn off.
                Err(e) if file == "memory.swap.max" && e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{file}={value}: {e}"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// What the tree has used so far.
    pub fn usage(&self) -> Usage {
        // Read at every exit, before its report: one openat and one read
        // each (see `small_file`).
        let read = |file: &str| crate::small_file::read_at(&self.dir, file);
        Usage {
            cpu_us: read("cpu.stat")
                .and_then(|t| keyed(&t, "usage_usec"))
                .unwrap_or(0),
            memory_peak_bytes: read("memory.peak")
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
            pids_peak: read("pids.peak")
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
        }
    }

    /// Removes the cgroup; fails with `EBUSY` while processes are left.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// The cgroup2 path in `/proc/self/cgroup` text (the `0::/path` line).
fn unified_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The `oom_kill` count in `memory.events` text.
fn oom_kill_count(events: &str) -> Option<u64> {
    keyed(events, "oom_kill")
}

/// The value of `key` in "key value" lines (`memory.events`, `cpu.stat`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, value) = l.split_once(' ')?;
        (k == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// `cpu.max` for a share of CPUs in thousandths, over a 100 ms period.
fn cpu_max(millis: u32) -> String {
    let period: u64 = 100_000;
    let quota = (u64::from(millis) * period / 1000).max(1000);
    format!("{quota} {period}")
}

/// Memory kept free of programs for the agent and the kernel: an eighth of
/// the guest, at least 24 MiB and at most 256 MiB.
pub fn agent_headroom(total: u64) -> u64 {
    (total / 8).clamp(24 << 20, 256 << 20)
}

/// The guest's memory from `/proc/meminfo` (`MemTotal`, `MemAvailable`), in
/// bytes.
pub fn meminfo() -> Option<(u64, u64)> {
    parse_meminfo(&crate::small_file::read(Path::new(MEMINFO))?)
}

/// Where the kernel reports the guest's memory.
pub const MEMINFO: &str = "/proc/meminfo";

/// `MemTotal` and `MemAvailable` in bytes, from the text of `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some((kib("MemTotal")? * 1024, kib("MemAvailable")? * 1024))
}

/// Caps what all programs together may use at the guest's memory less the
/// agent's headroom.
fn reserve_agent_headroom(parent: &Path) {
    let Some((total, _)) = meminfo() else {
        tracing::warn!("no /proc/meminfo; programs' memory is not capped");
        return;
    };
    let max = total.saturating_sub(agent_headroom(total));
    match std::fs::write(parent.join("memory.max"), max.to_string()) {
        Ok(()) => tracing::info!(
            max_mib = max >> 20,
            total_mib = total >> 20,
            "programs' memory capped below the agent's headroom"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot cap programs' memory"),
    }
    let _ = std::fs::write(parent.join("memory.swap.max"), "0");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unified_path_is_the_zero_line() {
        let text = "12:pids:/x\n1:name=systemd:/\n0::/user.slice/agent\n";
        assert_eq!(unified_path(text), Some("/user.slice/agent"));
        assert_eq!(unified_path("0::/\n"), Some("/"));
        assert_eq!(unified_path("4:memory:/a\n"), None);
    }

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kill_count(events), Some(2));
        assert_eq!(oom_kill_count("low 0\n"), None);
    }

    #[test]
    fn usage_and_limits_are_formatted_for_the_kernel() {
        assert_eq!(
            keyed("usage_usec 1234\nuser_usec 1000\n", "usage_usec"),
            Some(1234)
        );
        assert_eq!(cpu_max(500), "50000 100000");
        assert_eq!(cpu_max(2000), "200000 100000");
        assert_eq!(cpu_max(1), "1000 100000", "the kernel's smallest quota");
        assert_eq!(agent_headroom(256 << 20), 32 << 20);
        assert_eq!(agent_headroom(64 << 20), 24 << 20);
        assert_eq!(agent_headroom(64 << 30), 256 << 20);
    }

    #[test]
    fn detect_refuses_a_directory_that_is_not_cgroup2() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Cgroups::try_detect(dir.path()).is_err());
    }
}
