//! The process backend: the agent binary run as a plain host process,
//! serving gRPC on a Unix socket in the state directory
//! (`--listen unix:PATH`, as the agent's own tests run it).
//!
//! There is no VM: no kernel, no disks, no console, and the programs the
//! agent runs are host processes. It exists so the lifecycle (lifetime
//! ceiling, idle policy, the unresponsive-agent watchdog, reconnects) can be
//! tested in milliseconds; freezing it stops the agent and its programs
//! with SIGSTOP, as freezing QEMU stops the guest.
//!
//! The agent is in a process group of its own, so it outlives an owner
//! killed with SIGKILL just as QEMU does, and [`ProcessVm::adopt`] takes it
//! over: adoption can be tested without a VM too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::child::{command, kill_and_reap, record, signal, spawn};
use super::handle::{Exited, VmmProcess};
use super::log_file::tail;
use super::{cpu_time, VmmError};
use crate::state_dir::owner::ProcessId;
use crate::transport::AgentTransport;

/// The agent, running as a process.
#[derive(Debug)]
pub(crate) struct ProcessVm {
    child: VmmProcess,
    socket: PathBuf,
    log: PathBuf,
    exit: Option<Exited>,
    /// Whether dropping this value leaves the agent running.
    leave: bool,
}

impl ProcessVm {
    /// Starts `agent` serving on `agent.sock` in the state directory `dir`,
    /// its output in `agent.log` there.
    pub fn start(agent: &Path, dir: &Path) -> Result<Self, VmmError> {
        let socket = dir.join("agent.sock");
        let log = dir.join("agent.log");
        let mut cmd = command(agent);
        cmd.arg("--listen")
            .arg(format!("unix:{}", socket.display()));
        let mut child = spawn(&mut cmd, agent, &log)?;
        if let Err(error) = record(dir, &child) {
            kill_and_reap(&mut child);
            return Err(error);
        }
        tracing::debug!(pid = child.id(), agent = %agent.display(), "agent process started");
        Ok(ProcessVm {
            child: VmmProcess::Child(child),
            socket,
            log,
            exit: None,
            leave: false,
        })
    }

    /// Takes over the running agent `agent` serving in the state directory
    /// `dir`. Fails if that process no longer runs.
    pub fn adopt(dir: &Path, agent: ProcessId) -> Result<Self, VmmError> {
        Ok(ProcessVm {
            child: VmmProcess::adopt(agent)?,
            socket: dir.join("agent.sock"),
            log: dir.join("agent.log"),
            exit: None,
            leave: false,
        })
    }

    /// With `leave`, the agent runs on: [`kill`](ProcessVm::kill) and drop
    /// leave it alone.
    pub fn leave(&mut self, leave: bool) {
        self.leave = leave;
    }

    /// The agent's identity (pid and start time), while it runs.
    pub fn identity(&self) -> Option<ProcessId> {
        self.child.identity()
    }

    /// Whether the agent is stopped (frozen with SIGSTOP).
    pub fn is_frozen(&self) -> bool {
        self.child.is_stopped()
    }

    pub fn transport(&self) -> AgentTransport {
        AgentTransport::Unix(self.socket.clone())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn try_exit(&mut self) -> Result<Option<Exited>, VmmError> {
        if self.exit.is_none() {
            self.exit = self.child.try_exit()?;
        }
        Ok(self.exit)
    }

    /// SIGSTOP (or SIGCONT) to the agent and every program it runs.
    pub fn freeze(&mut self, frozen: bool) -> Result<(), VmmError> {
        if self.try_exit()?.is_some() {
            return Err(VmmError::Exited);
        }
        let sent = if frozen {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        // The agent first, so it starts no program meanwhile.
        self.child.signal(sent)?;
        for pid in descendants(self.pid()) {
            // A program may have ended in between.
            let _ = signal(pid, sent);
        }
        Ok(())
    }

    /// Kills the agent and the programs it runs, and reaps the agent
    /// (unless told to leave them).
    pub fn kill(&mut self) {
        if self.leave {
            return;
        }
        if self.exit.is_none() {
            let programs = descendants(self.pid());
            self.child.kill();
            for pid in programs {
                let _ = signal(pid, Signal::SIGKILL);
            }
            self.exit = self.child.try_exit().ok().flatten();
        }
    }

    /// The end of the agent's log.
    pub fn diagnostics(&self, max_bytes: usize) -> String {
        tail(&self.log, max_bytes)
    }

    /// The agent's own CPU time.
    pub fn cpu_time(&self) -> Option<Duration> {
        cpu_time::process_time(self.pid())
    }
}

impl Drop for ProcessVm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The processes below `root`, parents before children (from each
/// process's parent in `/proc/PID/stat`).
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn descendants_follow_parents() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let below = descendants(std::process::id());
        assert!(below.contains(&child.id()), "{below:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
