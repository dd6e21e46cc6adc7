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
//! - [`Reaper::spawn`] holds the same mutex around the clone and `exec`
//!   ([`Launch::spawn`]) and the table insert, so a child that exits at once
//!   cannot be reaped before its waiter is registered. (The spawn's own
//!   `waitpid` on a failed exec also runs under the lock, so the reaper
//!   cannot steal that status either.) The mutex also owns the one stack
//!   every clone's child runs on until it `exec`s.
//!
//! The `SIGCHLD` handler is installed before the first spawn, and the reap
//! loop runs once at start, so no exit is missed.
//!
//! The reap task never blocks its runtime thread on that mutex: a spawn
//! holds it for the whole `fork`/`exec` (milliseconds under emulation), and
//! a worker thread parked on it would stall every other call meanwhile. It
//! tries the lock and, while a spawn has it, waits for the holder's release
//! signal (`Reaper::released`) and tries again.

pub mod error;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{oneshot, Notify};

use crate::spawn::{ChildStack, Launch};

pub use self::error::ReaperError;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It called `exit(code)`.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

type Table = HashMap<i32, oneshot::Sender<Exit>>;

/// What the reaper's mutex guards: the waiters, and the stack spawns share
/// (mapped by the first spawn).
#[derive(Debug, Default)]
struct Children {
    table: Table,
    stack: Option<ChildStack>,
}

/// A handle for spawning children whose exits the reaper reports.
#[derive(Debug, Clone)]
pub struct Reaper {
    table: Arc<Mutex<Children>>,
    /// Signalled each time a spawn (or anyone else) lets go of `table`.
    released: Arc<Notify>,
}

impl Reaper {
    /// Installs the `SIGCHLD` handler and starts the reap task. Must be
    /// called inside a tokio runtime, before any child is spawned.
    pub fn start() -> Result<Self, ReaperError> {
        let mut sigchld = signal(SignalKind::child()).map_err(ReaperError::Signal)?;
        let table = Arc::new(Mutex::new(Children::default()));
        let released = Arc::new(Notify::new());
        let reaper = Self {
            table: Arc::clone(&table),
            released: Arc::clone(&released),
        };
        tokio::spawn(async move {
            loop {
                while !try_reap_all(&table) {
                    released.notified().await;
                }
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
            table: Arc::new(Mutex::new(Children::default())),
            released: Arc::new(Notify::new()),
        }
    }

    /// Starts `launch` and registers its pid; returns the pid and a
    /// receiver that yields its exit.
    ///
    /// This blocks for as long as the clone and `exec` take; call it from
    /// `spawn_blocking`.
    pub fn spawn(&self, launch: &Launch) -> std::io::Result<(u32, oneshot::Receiver<Exit>)> {
        self.with_children(|children| {
            let stack = match &mut children.stack {
                Some(stack) => stack,
                empty => empty.insert(ChildStack::new()?),
            };
            let pid = launch.spawn(stack)?;
            let (tx, rx) = oneshot::channel();
            children
                .table
                .insert(i32::try_from(pid).unwrap_or(i32::MAX), tx);
            Ok((pid, rx))
        })
    }

    /// Runs `f` if `pid` is a child that has not been reaped yet, holding
    /// the reap lock so the pid cannot be reaped (and reused) meanwhile:
    /// what `f` does to `pid` reaches the right process.
    pub fn while_unreaped<T>(&self, pid: u32, f: impl FnOnce() -> T) -> Option<T> {
        let pid = i32::try_from(pid).ok()?;
        self.with_children(|children| children.table.contains_key(&pid).then(f))
    }

    /// Runs `f` on the table, then tells a reap task that may have found
    /// it taken (a permit is kept if the task is not waiting yet).
    fn with_children<T>(&self, f: impl FnOnce(&mut Children) -> T) -> T {
        let out = {
            let mut children = self.table.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut children)
        };
        self.released.notify_one();
        out
    }
}

/// Reaps every child that has exited if no spawn holds the table; false
/// if one does (the reap task then waits for it: see the module docs).
fn try_reap_all(table: &Mutex<Children>) -> bool {
    let mut guard = match table.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return false,
    };
    reap_all(&mut guard.table);
    true
}

/// Reaps every child that has exited, without blocking.
fn reap_all(table: &mut Table) {
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
    use std::os::fd::OwnedFd;

    use super::*;

    fn null() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    fn sh(script: &str, stdin: OwnedFd) -> Launch {
        let argv = ["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
        Launch::new(&argv, &[], [stdin, null(), null()]).unwrap()
    }

    async fn run(reaper: &Reaper, script: &str) -> Exit {
        let (_pid, rx) = reaper.spawn(&sh(script, null())).unwrap();
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
            let launch = sh(&format!("exit {}", i % 5), null());
            waits.push((i % 5, reaper.spawn(&launch).unwrap().1));
        }
        for (code, rx) in waits {
            assert_eq!(rx.await.unwrap(), Exit::Code(code));
        }

        // A running child can be acted on; a reaped one cannot.
        let (theirs, ours) = std::io::pipe().unwrap();
        let launch = sh("read x", theirs.into());
        let (pid, rx) = reaper.spawn(&launch).unwrap();
        drop(launch);
        assert_eq!(reaper.while_unreaped(pid, || 5), Some(5));
        drop(ours); // closes its stdin: `read` ends
        assert_eq!(rx.await.unwrap(), Exit::Code(1));
        assert_eq!(reaper.while_unreaped(pid, || 5), None);

        // A child that exits while the table is held (for a spawn, in the
        // agent) is reaped once it is free, and meanwhile the runtime runs
        // on: the reap task waits for the table instead of blocking the
        // runtime's one thread on it.
        let launch = sh("exit 3", null());
        let holder = reaper.clone();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (pid, rx) = reaper.spawn(&launch).unwrap();
        let holding = std::thread::spawn(move || {
            holder.while_unreaped(pid, || {
                held_tx.send(()).unwrap();
                // Let go at the latest after 3 s, so a stalled runtime
                // fails the check below instead of hanging the test.
                let _ = release_rx.recv_timeout(std::time::Duration::from_secs(3));
            })
        });
        held_rx.recv().unwrap();
        // The child exits and SIGCHLD arrives while the table is held.
        let began = std::time::Instant::now();
        for _ in 0..5 {
            tokio::time::sleep(std::time::Duration::from_millis(40)).await;
        }
        assert!(
            began.elapsed() < std::time::Duration::from_millis(1500),
            "the runtime stalled while the table was held: {:?}",
            began.elapsed()
        );
        let _ = release_tx.send(());
        assert!(holding.join().unwrap().is_some(), "held while unreaped");
        assert_eq!(rx.await.unwrap(), Exit::Code(3));

        // A failed spawn registers nothing.
        let argv = ["/nonexistent/airlock-test-program".to_owned()];
        let launch = Launch::new(&argv, &[], [null(), null(), null()]).unwrap();
        let err = reaper.spawn(&launch).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(reaper.table.lock().unwrap().table.is_empty());
    }
}
