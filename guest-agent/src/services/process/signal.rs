//! Signalling a program and everything it started.
//!
//! A program's tree is its cgroup when the agent has cgroups (see
//! `cgroup`), else its process group (each program leads its own). The
//! cgroup catches descendants that start their own session or group; the
//! process group is the fallback outside a VM. The program alone is
//! signalled only while it is unreaped, under the reaper's lock, so a
//! recycled pid is never hit.

use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use super::cgroup::Cgroup;
use super::ProcessError;
use crate::reaper::Reaper;

/// Parses a signal number from a request.
pub fn parse(number: i32) -> Result<Signal, ProcessError> {
    Signal::try_from(number).map_err(|_| ProcessError::BadSignal(number))
}

/// A program's process tree.
#[derive(Debug)]
pub struct Tree {
    pid: u32,
    reaper: Reaper,
    cgroup: Mutex<Option<Cgroup>>,
}

impl Tree {
    /// The tree led by `pid`, in `cgroup` if it has one.
    pub fn new(pid: u32, reaper: Reaper, cgroup: Option<Cgroup>) -> Self {
        Self {
            pid,
            reaper,
            cgroup: Mutex::new(cgroup),
        }
    }

    fn cgroup(&self) -> std::sync::MutexGuard<'_, Option<Cgroup>> {
        self.cgroup.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the tree lives in a cgroup.
    pub fn has_cgroup(&self) -> bool {
        self.cgroup().is_some()
    }

    /// Sends `signal` to the program alone (`leader_only`) or to its tree.
    /// Fails with [`ProcessError::Exited`] when nothing is left to signal.
    pub fn signal(&self, signal: Signal, leader_only: bool) -> Result<(), ProcessError> {
        let pid = self.pid;
        let raw = i32::try_from(pid).map_err(|_| ProcessError::Exited(pid))?;
        let failed = |e: Errno| ProcessError::Signal {
            pid,
            source: std::io::Error::from(e),
        };
        if leader_only {
            return match self
                .reaper
                .while_unreaped(pid, || kill(Pid::from_raw(raw), signal))
            {
                Some(Ok(())) | Some(Err(Errno::ESRCH)) => Ok(()),
                Some(Err(e)) => Err(failed(e)),
                None => Err(ProcessError::Exited(pid)),
            };
        }
        if let Some(cgroup) = self.cgroup().as_ref() {
            tracing::debug!(pid, ?signal, cgroup = %cgroup.path().display(), "signalling tree");
            return match cgroup.signal(signal) {
                Ok(0) => Err(ProcessError::Exited(pid)),
                Ok(_) => Ok(()),
                Err(source) => Err(ProcessError::Signal { pid, source }),
            };
        }
        // Without a cgroup the group is only trusted while its leader is
        // unreaped: after that its id may belong to someone else.
        tracing::debug!(pid, ?signal, "signalling process group");
        match self
            .reaper
            .while_unreaped(pid, || killpg(Pid::from_raw(raw), signal))
        {
            Some(Ok(())) | Some(Err(Errno::ESRCH)) => Ok(()),
            Some(Err(e)) => Err(failed(e)),
            None => Err(ProcessError::Exited(pid)),
        }
    }

    /// Kills the whole tree, as far as it is still there.
    pub fn kill(&self) {
        match self.signal(Signal::SIGKILL, false) {
            Ok(()) | Err(ProcessError::Exited(_)) => {}
            Err(e) => {
                tracing::warn!(pid = self.pid, error = %airlock_report::chain(&e), "cannot kill tree")
            }
        }
    }

    /// How many of the tree's processes the OOM killer killed, if known.
    pub fn oom_kills(&self) -> Option<u64> {
        self.cgroup().as_ref()?.oom_kills()
    }

    /// What the tree used, from its cgroup.
    pub fn usage(&self) -> Option<airlock_proto::v1::Usage> {
        self.cgroup().as_ref().map(Cgroup::usage)
    }

    /// Removes the cgroup if it is empty; keeps it (for a later try) while
    /// processes are left in it.
    pub fn try_release_cgroup(&self) {
        let mut slot = self.cgroup();
        if let Some(cgroup) = slot.as_ref() {
            match cgroup.remove() {
                Ok(()) => *slot = None,
                Err(e) => {
                    tracing::debug!(cgroup = %cgroup.path().display(), error = %e, "cgroup kept");
                }
            }
        }
    }

    /// Takes the cgroup away (the tree is being forgotten).
    pub fn take_cgroup(&self) -> Option<Cgroup> {
        self.cgroup().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_numbers_are_checked() {
        assert_eq!(parse(15).ok(), Some(Signal::SIGTERM));
        assert_eq!(parse(9).ok(), Some(Signal::SIGKILL));
        for bad in [0, -1, 65, 1000] {
            assert!(matches!(parse(bad), Err(ProcessError::BadSignal(n)) if n == bad));
        }
    }
}
