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
//! [`Cgroups::create`] makes `exec-<n>` for one program; the child joins it
//! between fork and exec (see `child_setup`), so nothing it forks escapes.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};
use nix::unistd::Pid;

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
}

/// One program's cgroup.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
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
            if let Err(e) = std::fs::write(dir.join("cgroup.subtree_control"), "+memory") {
                tracing::debug!(dir = %dir.display(), error = %e, "memory controller not enabled");
            }
        }
        Ok(Self {
            parent,
            next: AtomicU64::new(1),
        })
    }

    /// Creates a fresh cgroup for one program.
    pub fn create(&self) -> std::io::Result<Cgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.parent.join(format!("exec-{n}"));
        std::fs::create_dir(&path)?;
        Ok(Cgroup { path })
    }
}

impl Cgroup {
    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cgroup.procs`, open for writing: a process that writes `0` to it
    /// joins the cgroup.
    pub fn procs_for_joining(&self) -> std::io::Result<File> {
        OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))
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
        let events = std::fs::read_to_string(self.path.join("memory.events")).ok()?;
        oom_kill_count(&events)
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
    events.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == "oom_kill")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
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
    fn detect_refuses_a_directory_that_is_not_cgroup2() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Cgroups::try_detect(dir.path()).is_err());
    }
}
