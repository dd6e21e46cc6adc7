//! [`VmmProcess`]: one VMM process (QEMU, or the agent on the process
//! backend), either started here or adopted from an owner that died.
//!
//! A started process is our [`Child`]: its exit is ours to reap. An
//! adopted one is not (its parent died and init took it over), so nothing
//! here waits for it: it is named by pid and start time
//! ([`ProcessId`]), and held by a pidfd opened after that identity was
//! checked, so a signal reaches that very process even once its pid could
//! be reused, and its exit shows as the pidfd turning readable.

use std::os::fd::OwnedFd;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags};

use super::VmmError;
use crate::state_dir::owner::ProcessId;

/// How long an adopted process may take to go after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// How a VMM process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exited {
    /// A child's exit status.
    Status(ExitStatus),
    /// An adopted process ended; not being its parent, this process never
    /// learns its status.
    Adopted,
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exited::Status(status) => write!(f, "{status}"),
            Exited::Adopted => f.write_str("exited; its status is unknown (an adopted process)"),
        }
    }
}

/// A VMM process this library controls.
#[derive(Debug)]
pub(crate) enum VmmProcess {
    /// Started by this process.
    Child(Child),
    /// Taken over from an owner that died.
    Adopted(Adopted),
}

/// A process that is not our child: its identity and a pidfd on it.
#[derive(Debug)]
pub(crate) struct Adopted {
    id: ProcessId,
    pidfd: OwnedFd,
    exited: bool,
}

impl VmmProcess {
    /// Takes over the running process `id`. Fails if no process runs with
    /// that pid and start time (it ended, and its pid may be another's).
    pub fn adopt(id: ProcessId) -> Result<Self, VmmError> {
        let gone = || VmmError::Exited;
        if !id.is_running() {
            return Err(gone());
        }
        let pid = i32::try_from(id.pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(gone)?;
        let pidfd = pidfd_open(pid, PidfdFlags::empty())
            .map_err(|errno| VmmError::Adopt(std::io::Error::from(errno)))?;
        // Still the same process after the pidfd was opened: then the
        // pidfd is on it (a pid is only reused once its process is gone).
        if !id.is_running() {
            return Err(gone());
        }
        Ok(VmmProcess::Adopted(Adopted {
            id,
            pidfd,
            exited: false,
        }))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        match self {
            VmmProcess::Child(child) => child.id(),
            VmmProcess::Adopted(adopted) => adopted.id.pid,
        }
    }

    /// The process's identity (pid and start time), while it runs.
    pub fn identity(&self) -> Option<ProcessId> {
        match self {
            VmmProcess::Child(child) => ProcessId::of(child.id()),
            VmmProcess::Adopted(adopted) => Some(adopted.id),
        }
    }

    /// How the process ended, if it has, without blocking.
    pub fn try_exit(&mut self) -> Result<Option<Exited>, VmmError> {
        match self {
            VmmProcess::Child(child) => Ok(child
                .try_wait()
                .map_err(VmmError::Wait)?
                .map(Exited::Status)),
            VmmProcess::Adopted(adopted) => {
                Ok(adopted.wait(Duration::ZERO)?.then_some(Exited::Adopted))
            }
        }
    }

    /// Sends `signal` to the process (which must not have been reaped:
    /// callers check [`try_exit`](VmmProcess::try_exit) first).
    pub fn signal(&self, signal: Signal) -> Result<(), VmmError> {
        match self {
            VmmProcess::Child(child) => super::child::signal(child.id(), signal),
            VmmProcess::Adopted(adopted) => {
                let signal = rustix::process::Signal::from_named_raw(signal as i32)
                    .ok_or(VmmError::Signal(nix::Error::EINVAL))?;
                pidfd_send_signal(&adopted.pidfd, signal)
                    .map_err(|errno| VmmError::Signal(nix::Error::from_raw(errno.raw_os_error())))
            }
        }
    }

    /// Whether the process is stopped (SIGSTOP): a paused sandbox's.
    pub fn is_stopped(&self) -> bool {
        self.identity().is_some_and(|id| id.is_stopped())
    }

    /// Kills the process and waits until it is gone (a child is reaped).
    /// Idempotent.
    pub fn kill(&mut self) {
        match self {
            VmmProcess::Child(child) => super::child::kill_and_reap(child),
            VmmProcess::Adopted(adopted) => adopted.kill(),
        }
    }
}

impl Adopted {
    /// Whether the process has exited, waiting up to `timeout` for it.
    fn wait(&mut self, timeout: Duration) -> Result<bool, VmmError> {
        if self.exited {
            return Ok(true);
        }
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let ready = match poll(&mut fds, Some(&timeout)) {
            Ok(ready) => ready,
            Err(rustix::io::Errno::INTR) => 0,
            Err(errno) => return Err(VmmError::Wait(std::io::Error::from(errno))),
        };
        self.exited = ready > 0;
        Ok(self.exited)
    }

    fn kill(&mut self) {
        if self.exited {
            return;
        }
        if let Err(error) = pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL) {
            if error != rustix::io::Errno::SRCH {
                tracing::warn!(%error, pid = self.id.pid, "cannot kill an adopted VMM process");
                return;
            }
        }
        let deadline = Instant::now() + KILL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait(left.min(Duration::from_millis(100))) {
                Ok(true) => return,
                Ok(false) if left.is_zero() => {
                    tracing::warn!(pid = self.id.pid, timeout = ?KILL_TIMEOUT, "an adopted VMM process still runs after SIGKILL");
                    return;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, pid = self.id.pid, "cannot wait for an adopted VMM process");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sleeper() -> Child {
        Command::new("sleep").arg("1000").spawn().unwrap()
    }

    #[test]
    fn an_adopted_process_is_signalled_seen_stopped_and_killed() {
        let mut child = sleeper();
        let id = ProcessId::of(child.id()).unwrap();
        let mut adopted = VmmProcess::adopt(id).unwrap();
        assert_eq!(adopted.id(), child.id());
        assert_eq!(adopted.try_exit().unwrap(), None);

        adopted.signal(Signal::SIGSTOP).unwrap();
        let stopped = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            adopted.is_stopped()
        });
        assert!(stopped, "SIGSTOP shows as stopped");
        adopted.signal(Signal::SIGCONT).unwrap();

        // The test is the parent here: reap the child as init would.
        let reaper = std::thread::spawn(move || child.wait().unwrap());
        adopted.kill();
        assert_eq!(adopted.try_exit().unwrap(), Some(Exited::Adopted));
        assert!(!reaper.join().unwrap().success());
        // Idempotent once gone.
        adopted.kill();
    }

    #[test]
    fn a_process_that_ended_cannot_be_adopted() {
        let mut child = sleeper();
        let id = ProcessId::of(child.id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(VmmProcess::adopt(id), Err(VmmError::Exited)));
        let recycled = ProcessId {
            start_time: id.start_time + 1,
            ..ProcessId::current().unwrap()
        };
        assert!(matches!(VmmProcess::adopt(recycled), Err(VmmError::Exited)));
    }
}
