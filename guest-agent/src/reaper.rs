//! The one owner of `waitpid(-1)`: every child and every orphan is reaped here.
//!
//! As PID 1 (or a child subreaper) the agent inherits orphans, and anything
//! else calling `wait` would steal their exit statuses, which is why the agent
//! does not use `tokio::process`. Instead:
//!
//! - [`Reaper::start`] spawns a task woken by `SIGCHLD` that loops
//!   `waitpid(-1, WNOHANG)` while holding a mutex on the table of
//!   pid -> [`oneshot::Sender<Exit>`]. A registered pid's status is sent to
//!   its waiter; an unregistered one (an orphan) is logged and dropped.
//! - [`Reaper::spawn`] holds the same mutex around `Command::spawn` and the
//!   table insert, so a child that exits at once cannot be reaped before its
//!   waiter is registered. (std's own `waitpid` on a failed exec also runs
//!   under the lock, so the reaper cannot steal that status either.)
//!
//! The `SIGCHLD` handler is installed before the first spawn, and the reap
//! loop runs once at start, so no exit is missed.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It called `exit(code)`.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// The reaper could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    /// The `SIGCHLD` handler could not be installed.
    #[error("cannot watch SIGCHLD")]
    Signal(#[source] std::io::Error),
}

type Table = HashMap<i32, oneshot::Sender<Exit>>;

/// A handle for spawning children whose exits the reaper reports.
#[derive(Debug, Clone)]
pub struct Reaper {
    table: Arc<Mutex<Table>>,
}

impl Reaper {
    /// Installs the `SIGCHLD` handler and starts the reap task. Must be
    /// called inside a tokio runtime, before any child is spawned.
    pub fn start() -> Result<Self, ReaperError> {
        let mut sigchld = signal(SignalKind::child()).map_err(ReaperError::Signal)?;
        let table = Arc::new(Mutex::new(Table::new()));
        let reaper = Self {
            table: Arc::clone(&table),
        };
        tokio::spawn(async move {
            loop {
                reap_all(&table);
                if sigchld.recv().await.is_none() {
                    tracing::error!("SIGCHLD stream ended; no more children will be reaped");
                    break;
                }
            }
        });
        Ok(reaper)
    }

    /// A reaper with no reap task, for unit tests that never spawn.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self {
            table: Arc::new(Mutex::new(Table::new())),
        }
    }

    /// Spawns `command` and registers its pid; the receiver yields its exit.
    ///
    /// This blocks for as long as `fork`/`exec` takes; call it from
    /// `spawn_blocking`.
    pub fn spawn(
        &self,
        command: &mut Command,
    ) -> std::io::Result<(Child, oneshot::Receiver<Exit>)> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let child = command.spawn()?;
        let (tx, rx) = oneshot::channel();
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        table.insert(pid, tx);
        Ok((child, rx))
    }

    /// Runs `f` if `pid` is a child that has not been reaped yet, holding
    /// the reap lock so the pid cannot be reaped (and reused) meanwhile:
    /// what `f` does to `pid` reaches the right process.
    pub fn while_unreaped<T>(&self, pid: u32, f: impl FnOnce() -> T) -> Option<T> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = i32::try_from(pid).ok()?;
        table.contains_key(&pid).then(f)
    }
}

/// Reaps every child that has exited, without blocking.
fn reap_all(table: &Mutex<Table>) {
    let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let (pid, exit) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
            Ok(WaitStatus::Signaled(pid, signal, _core)) => (pid, Exit::Signal(signal as i32)),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
            Ok(other) => {
                tracing::debug!(status = ?other, "ignoring non-exit wait status");
                continue;
            }
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "waitpid failed");
                return;
            }
        };
        match table.remove(&pid.as_raw()) {
            Some(waiter) => {
                tracing::debug!(pid = pid.as_raw(), ?exit, "child exited");
                // The waiter may be gone (its task ended); the child is reaped either way.
                let _ = waiter.send(exit);
            }
            None => tracing::debug!(pid = pid.as_raw(), ?exit, "reaped orphan"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn run(reaper: &Reaper, script: &str) -> Exit {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script);
        let (_child, rx) = reaper.spawn(&mut cmd).unwrap();
        rx.await.unwrap()
    }

    // One test: `waitpid(-1)` reaps every child of the test process, so two
    // reapers in parallel tests would steal each other's children.
    #[tokio::test]
    async fn reaps_every_child_and_reports_how_it_ended() {
        let reaper = Reaper::start().unwrap();
        assert_eq!(run(&reaper, "exit 0").await, Exit::Code(0));
        assert_eq!(run(&reaper, "exit 7").await, Exit::Code(7));
        assert_eq!(run(&reaper, "kill -9 $$").await, Exit::Signal(9));

        // Children that exit at once are never lost.
        let mut waits = Vec::new();
        for i in 0..50 {
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-c").arg(format!("exit {}", i % 5));
            waits.push((i % 5, reaper.spawn(&mut cmd).unwrap().1));
        }
        for (code, rx) in waits {
            assert_eq!(rx.await.unwrap(), Exit::Code(code));
        }

        // A running child can be acted on; a reaped one cannot.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg("read x");
        cmd.stdin(std::process::Stdio::piped());
        let (child, rx) = reaper.spawn(&mut cmd).unwrap();
        let pid = child.id();
        assert_eq!(reaper.while_unreaped(pid, || 5), Some(5));
        drop(child); // closes its stdin: `read` ends
        assert_eq!(rx.await.unwrap(), Exit::Code(1));
        assert_eq!(reaper.while_unreaped(pid, || 5), None);

        // A failed spawn registers nothing.
        let mut cmd = Command::new("/nonexistent/airlock-test-program");
        let err = reaper.spawn(&mut cmd).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(reaper.table.lock().unwrap().is_empty());
    }
}
